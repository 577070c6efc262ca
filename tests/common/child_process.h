#pragma once
// A child process for the Qt-free suites (POSIX, header-only): started from a program path and
// arguments, its standard output and error captured through pipes, waited for with a timeout,
// signalled, and never left behind: the destructor terminates a child still running and reaps it.
//
//   symtune::test::ChildProcess runner;
//   runner.start(SYMTUNE_BIN_DIR "/symtune-runner", {session, "--listen", "tcp:0.0.0.0:0"});
//   CHECK(runner.waitForFinished(std::chrono::seconds(120)));
//   CHECK(runner.exitCode() == 2);
//   CHECK(runner.standardError().find("loopback") != std::string::npos);
//
// The pipes are read while a wait runs and whenever the output is asked for, both pipes together
// (poll), so a child filling one while the test waits on the other or on its exit does not
// deadlock. Between those calls nothing reads: a child that writes more than a pipe holds (64 KiB
// on Linux) meanwhile blocks in its write until the test next asks. The programs the suites start
// write a few lines.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

extern char** environ;

namespace symtune::test {

class ChildProcess {
 public:
  struct Options {
    // Set in the child on top of this process's environment (a name given here replaces it).
    std::map<std::string, std::string> environment;
    // The child's working directory; empty: this process's.
    std::string workingDirectory;
  };

  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // A child still running gets SIGTERM, then SIGKILL if it has not exited after kTerminateGrace;
  // either way it is reaped, so no test leaves a process or a zombie behind.
  ~ChildProcess() {
    if (started() && !reaped_) {
      terminate();
      if (!waitForFinished(kTerminateGrace)) {
        kill();
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
      }
    }
    closeFd(out_.fd);
    closeFd(err_.fd);
  }

  // Runs `program` (a path, as execve takes it: PATH is not searched) with `arguments`; stdin is
  // /dev/null. Returns once the program is executing. Throws std::runtime_error naming the program
  // and the reason (errno's text) when it cannot be started, std::logic_error on a second start.
  void start(const std::string& program, const std::vector<std::string>& arguments,
             const Options& options = {}) {
    if (started())
      throw std::logic_error("ChildProcess::start: " + program + " was started already");
    program_ = program;

    // Everything the child needs is made here: between fork and exec it may only make
    // async-signal-safe calls (this process may have other threads).
    std::vector<std::string> argvStrings{program};
    argvStrings.insert(argvStrings.end(), arguments.begin(), arguments.end());
    std::vector<std::string> envStrings = environmentWith(options.environment);
    std::vector<char*> argv = pointersTo(argvStrings);
    std::vector<char*> envp = pointersTo(envStrings);
    const char* workingDirectory =
        options.workingDirectory.empty() ? nullptr : options.workingDirectory.c_str();

    // Close-on-exec everywhere: the child keeps only what it dup2s onto 0, 1 and 2, and the
    // failure pipe closes by itself when exec succeeds.
    Fd devNull{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
    if (devNull.fd < 0)
      fail("cannot open /dev/null", errno);
    Pipe out = makePipe(), err = makePipe(), failure = makePipe();

    const pid_t pid = ::fork();
    if (pid < 0)
      fail("fork", errno);
    if (pid == 0) {
      // The child. A blocked signal and an ignored SIGPIPE would survive exec: the one would keep
      // terminate() from working, the other give the program a disposition it does not expect.
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      struct sigaction byDefault {};
      byDefault.sa_handler = SIG_DFL;
      sigaction(SIGPIPE, &byDefault, nullptr);
      if (::dup2(devNull.fd, STDIN_FILENO) < 0 || ::dup2(out.write.fd, STDOUT_FILENO) < 0 ||
          ::dup2(err.write.fd, STDERR_FILENO) < 0) {
        reportAndExit(failure.write.fd, Stage::Redirect);
      }
      if (workingDirectory && ::chdir(workingDirectory) != 0)
        reportAndExit(failure.write.fd, Stage::ChangeDirectory);
      ::execve(argv[0], argv.data(), envp.data());
      reportAndExit(failure.write.fd, Stage::Execute);
    }

    pid_ = pid;
    failure.write.close();
    out.write.close();
    err.write.close();
    StartFailure report{};
    ssize_t got;
    while ((got = ::read(failure.read.fd, &report, sizeof report)) < 0 && errno == EINTR) {
    }
    if (got > 0) {  // the child could not exec, said why and exited
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
      if (report.stage == Stage::Redirect)
        fail("cannot redirect its standard streams", report.error);
      if (report.stage == Stage::ChangeDirectory)
        fail("cannot change to " + options.workingDirectory, report.error);
      fail("", report.error);
    }
    out_.fd = out.read.release();
    err_.fd = err.read.release();
    setNonBlocking(out_.fd);
    setNonBlocking(err_.fd);
  }

  pid_t pid() const { return pid_; }

  // Whether the child is still running (reaps it when it has exited).
  bool running() { return started() && !tryReap(); }

  // Waits until the child has exited, up to `timeout`, reading its output meanwhile. True once it
  // has exited (at once when it had already); false on timeout or when it was never started.
  bool waitForFinished(std::chrono::milliseconds timeout) {
    if (!started())
      return false;
    const auto deadline = Clock::now() + timeout;
    while (!tryReap()) {
      const auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero())
        return false;
      // No portable way to poll for a child's exit: poll the pipes in short slices and look.
      pollPipes(std::min<Clock::duration>(left, kReapInterval));
      readAvailable();
    }
    readAvailable();  // what it wrote before exiting is still in the pipes
    return true;
  }

  // Waits up to `timeout` for more output on either stream. True when some arrived; false on
  // timeout, or at once when the child has exited and nothing more is in its pipes.
  bool waitForOutput(std::chrono::milliseconds timeout) {
    if (!started())
      return false;
    const size_t before = out_.text.size() + err_.text.size();
    const auto deadline = Clock::now() + timeout;
    while (true) {
      const bool exited = tryReap();  // before reading: then the pipes hold all it wrote
      readAvailable();
      if (out_.text.size() + err_.text.size() > before)
        return true;
      const auto left = deadline - Clock::now();
      if (exited || left <= Clock::duration::zero())
        return false;
      pollPipes(std::min<Clock::duration>(left, kReapInterval));
    }
  }

  // Everything the child has written to each stream so far (what is waiting in the pipe is read
  // first, without waiting for more).
  const std::string& standardOutput() {
    readAvailable();
    return out_.text;
  }
  const std::string& standardError() {
    readAvailable();
    return err_.text;
  }

  // Closes this end of the child's standard output, as a `| head` that has exited does: the
  // child's next write there fails (SIGPIPE, or EPIPE where it ignores that). What it wrote
  // before stays in standardOutput().
  void closeStandardOutput() {
    readAvailable();
    closeFd(out_.fd);
  }

  // SIGTERM and SIGKILL; nothing once the child has been reaped (its pid may be another's by
  // then).
  void terminate() { sendSignal(SIGTERM); }
  void kill() { sendSignal(SIGKILL); }

  // After the child has exited: whether it returned from main or called exit (rather than being
  // killed by a signal), its exit status, and the signal that killed it. -1 where they don't apply.
  bool exitedNormally() const { return statusKnown_ && WIFEXITED(status_); }
  int exitCode() const { return exitedNormally() ? WEXITSTATUS(status_) : -1; }
  int exitSignal() const { return statusKnown_ && WIFSIGNALED(status_) ? WTERMSIG(status_) : -1; }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kTerminateGrace{3000};
  static constexpr std::chrono::milliseconds kReapInterval{20};

  enum class Stage : int { Redirect, ChangeDirectory, Execute };
  struct StartFailure {
    Stage stage;
    int error;
  };

  // A descriptor closed when it goes out of scope (start's pipes, also on the throwing paths).
  struct Fd {
    int fd = -1;
    Fd() = default;
    explicit Fd(int f) : fd(f) {}
    Fd(Fd&& other) noexcept : fd(other.release()) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { close(); }
    void close() { closeFd(fd); }
    int release() { return std::exchange(fd, -1); }
  };
  struct Pipe {
    Fd read, write;
  };

  // One of the child's output streams: the read end of its pipe (-1 once at end of file) and all
  // it has delivered.
  struct Stream {
    int fd = -1;
    std::string text;
  };

  bool started() const { return pid_ > 0; }

  [[noreturn]] void fail(const std::string& what, int error) const {
    std::string message = "cannot start " + program_ + ": ";
    if (!what.empty())
      message += what + ": ";
    throw std::runtime_error(message + std::system_category().message(error));
  }

  Pipe makePipe() const {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0)
      fail("cannot make a pipe", errno);
    Pipe pipe;
    pipe.read.fd = ends[0];
    pipe.write.fd = ends[1];
    return pipe;
  }

  static std::vector<std::string> environmentWith(
      const std::map<std::string, std::string>& overrides) {
    std::vector<std::string> entries;
    for (char** entry = environ; entry && *entry; ++entry) {
      const std::string text = *entry;
      if (!overrides.count(text.substr(0, text.find('='))))
        entries.push_back(text);
    }
    for (const auto& [name, value] : overrides)
      entries.push_back(name + "=" + value);
    return entries;
  }

  // argv/envp for execve: pointers into `strings` (which must outlive them), null-terminated.
  static std::vector<char*> pointersTo(std::vector<std::string>& strings) {
    std::vector<char*> pointers;
    for (auto& s : strings)
      pointers.push_back(s.data());
    pointers.push_back(nullptr);
    return pointers;
  }

  // In the child, between fork and exec: async-signal-safe calls only.
  [[noreturn]] static void reportAndExit(int failureFd, Stage stage) {
    const StartFailure report{stage, errno};
    [[maybe_unused]] const ssize_t written = ::write(failureFd, &report, sizeof report);
    ::_exit(127);
  }

  static void setNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

  static void closeFd(int& fd) {
    if (fd >= 0)
      ::close(fd);
    fd = -1;
  }

  bool tryReap() {
    if (reaped_)
      return true;
    pid_t r;
    while ((r = ::waitpid(pid_, &status_, WNOHANG)) < 0 && errno == EINTR) {
    }
    // r < 0 (ECHILD): reaped elsewhere, e.g. with SIGCHLD ignored; it has exited all the same.
    reaped_ = r != 0;
    statusKnown_ = r == pid_;
    return reaped_;
  }

  void sendSignal(int number) {
    if (started() && !tryReap())
      ::kill(pid_, number);
  }

  // Waits up to `timeout` for either pipe to be readable (or closed); sleeps when both are closed.
  void pollPipes(Clock::duration timeout) {
    pollfd fds[2];
    nfds_t count = 0;
    for (const Stream* s : {&out_, &err_}) {
      if (s->fd >= 0)
        fds[count++] = pollfd{s->fd, POLLIN, 0};
    }
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(timeout).count();
    ::poll(count ? fds : nullptr, count, static_cast<int>(ms));  // EINTR: the caller loops
  }

  // Reads what is waiting in both pipes, without waiting.
  void readAvailable() {
    for (Stream* s : {&out_, &err_}) {
      char buffer[4096];
      while (s->fd >= 0) {
        const ssize_t n = ::read(s->fd, buffer, sizeof buffer);
        if (n > 0)
          s->text.append(buffer, static_cast<size_t>(n));
        else if (n < 0 && errno == EINTR)
          continue;
        else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
          break;  // nothing more for now
        else
          closeFd(s->fd);  // end of file (the child and any child of its closed it) or an error
      }
    }
  }

  std::string program_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  bool statusKnown_ = false;  // false also when it was reaped elsewhere
  int status_ = 0;
  Stream out_, err_;
};

}  // namespace symtune::test
