#include "symtune/data/array_files.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/script.h>

namespace symtune {

namespace {

std::string readBytes(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw DataError(path.string() + ": no such file");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in && !in.eof())
    throw DataError(path.string() + ": cannot read the file");
  return bytes.str();
}

uint32_t le16(const std::string& b, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(b[at])) |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 1])) << 8;
}
uint32_t le32(const std::string& b, size_t at) {
  return le16(b, at) | le16(b, at + 2) << 16;
}
uint64_t le64(const std::string& b, size_t at) {
  return static_cast<uint64_t>(le32(b, at)) | static_cast<uint64_t>(le32(b, at + 4)) << 32;
}

// The value after `'key':` in an .npy header (a Python dict literal), up to its end.
std::string headerValue(const std::string& header, const std::string& key,
                        const std::string& where) {
  const std::string quoted = "'" + key + "'";
  const size_t at = header.find(quoted);
  const size_t colon = at == std::string::npos ? at : header.find(':', at + quoted.size());
  if (colon == std::string::npos)
    throw DataError(where + ": not an .npy array: its header has no " + quoted);
  size_t begin = header.find_first_not_of(' ', colon + 1);
  if (begin == std::string::npos)
    throw DataError(where + ": not an .npy array: its header ends after " + quoted);
  size_t end = begin;
  if (header[begin] == '(') {
    end = header.find(')', begin);
    if (end == std::string::npos)
      throw DataError(where + ": not an .npy array: unterminated shape");
    return header.substr(begin + 1, end - begin - 1);
  }
  if (header[begin] == '\'') {
    end = header.find('\'', begin + 1);
    if (end == std::string::npos)
      throw DataError(where + ": not an .npy array: unterminated " + quoted);
    return header.substr(begin + 1, end - begin - 1);
  }
  end = header.find_first_of(",}", begin);
  return header.substr(begin, end - begin);
}

struct NpyType {
  torch::ScalarType scalar;
  size_t bytes;
};

NpyType npyType(const std::string& descr, const std::string& where) {
  if (descr.size() >= 2 && descr[1] == 'O')  // '|O': numpy's object arrays
    throw DataError(where +
                    ": holds Python objects (a pickled object array), not numbers: save "
                    "ragged sequences padded, with their lengths in an array of their own");
  if (descr.size() < 3)
    throw DataError(where + ": unsupported dtype '" + descr + "'");
  const char kind = descr[1];
  const std::string size = descr.substr(2);
  const auto is = [&](char k, const char* s) { return kind == k && size == s; };
  if (is('b', "1"))
    return {torch::kBool, 1};
  if (is('u', "1"))
    return {torch::kUInt8, 1};
  if (is('i', "1"))
    return {torch::kInt8, 1};
  if (is('i', "2"))
    return {torch::kInt16, 2};
  if (is('i', "4"))
    return {torch::kInt32, 4};
  if (is('i', "8"))
    return {torch::kInt64, 8};
  if (is('f', "2"))
    return {torch::kHalf, 2};
  if (is('f', "4"))
    return {torch::kFloat, 4};
  if (is('f', "8"))
    return {torch::kDouble, 8};
  throw DataError(where + ": dtype '" + descr +
                  "' is not supported (bool, int8/16/32/64, uint8, float16/32/64)");
}

// The .npy bytes' dtype, order and shape, and where the data begins.
torch::Tensor npyTensor(const std::string& bytes, const std::string& where) {
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0)
    throw DataError(where + ": not an .npy array (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t headerLength = 0, headerStart = 0;
  if (major == 1) {
    headerLength = le16(bytes, 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      throw DataError(where + ": truncated .npy header");
    headerLength = le32(bytes, 8);
    headerStart = 12;
  } else {
    throw DataError(where + ": .npy format version " + std::to_string(major) +
                    " is not supported (1, 2 or 3)");
  }
  if (bytes.size() < headerStart + headerLength)
    throw DataError(where + ": truncated .npy header");
  const std::string header = bytes.substr(headerStart, headerLength);
  const std::string descr = headerValue(header, "descr", where);
  const NpyType type = npyType(descr, where);
  const bool bigEndian = descr[0] == '>';
  const std::string fortran = headerValue(header, "fortran_order", where);
  const std::string shapeText = headerValue(header, "shape", where);
  std::vector<int64_t> shape;
  std::istringstream dims(shapeText);
  std::string dim;
  while (std::getline(dims, dim, ',')) {
    dim.erase(std::remove(dim.begin(), dim.end(), ' '), dim.end());
    if (dim.empty())
      continue;
    const bool digits =
        std::all_of(dim.begin(), dim.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || dim.size() > 18)  // 18 digits: below 2^63, so stoll cannot overflow
      throw DataError(where + ": not an .npy array: shape (" + shapeText + ")");
    shape.push_back(std::stoll(dim));
  }
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d != 0 && count > std::numeric_limits<int64_t>::max() / d)
      throw DataError(where + ": its shape (" + shapeText +
                      ") holds more values than int64 counts");
    count *= d;
  }
  if (static_cast<uint64_t>(count) > std::numeric_limits<size_t>::max() / type.bytes)
    throw DataError(where + ": its shape (" + shapeText + ") holds more bytes than memory has");
  const size_t dataStart = headerStart + headerLength;
  const size_t need = static_cast<size_t>(count) * type.bytes;
  if (bytes.size() - dataStart < need)
    throw DataError(where + ": truncated: " + std::to_string(need) + " bytes of data expected, " +
                    std::to_string(bytes.size() - dataStart) + " found");
  const bool columnMajor = fortran.find("True") != std::string::npos;
  std::vector<int64_t> stored = shape;
  if (columnMajor)
    std::reverse(stored.begin(), stored.end());
  torch::Tensor t = torch::empty(stored, torch::TensorOptions().dtype(type.scalar));
  auto* out = static_cast<char*>(t.data_ptr());
  std::memcpy(out, bytes.data() + dataStart, need);
  if (bigEndian && type.bytes > 1) {
    for (size_t i = 0; i < need; i += type.bytes)
      std::reverse(out + i, out + i + type.bytes);
  }
  if (columnMajor && t.dim() > 1) {
    std::vector<int64_t> order(static_cast<size_t>(t.dim()));
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = static_cast<int64_t>(order.size() - 1 - i);
    t = t.permute(order).contiguous();
  }
  return t;
}

// One member of a ZIP archive, as its central directory has it.
struct ZipMember {
  std::string name;
  uint32_t method = 0, crc = 0;
  uint64_t compressed = 0, size = 0, offset = 0;
};

// Whether `n` bytes from `at` lie inside `size` bytes (`at` as a file gives it: no sum that wraps).
bool fits(uint64_t at, uint64_t n, uint64_t size) {
  return at <= size && size - at >= n;
}

std::vector<ZipMember> zipDirectory(const std::string& b, const std::string& where) {
  // The end-of-central-directory record is in the last 64 KiB + 22 bytes.
  if (b.size() < 22)
    throw DataError(where + ": not a ZIP archive (too short)");
  size_t eocd = std::string::npos;
  const size_t lowest = b.size() > 65557 ? b.size() - 65557 : 0;
  for (size_t at = b.size() - 22 + 1; at-- > lowest;) {
    if (le32(b, at) == 0x06054b50) {
      eocd = at;
      break;
    }
  }
  if (eocd == std::string::npos)
    throw DataError(where + ": not a ZIP archive (no end of central directory)");
  uint64_t entries = le16(b, eocd + 10), directory = le32(b, eocd + 16);
  if ((entries == 0xffff || directory == 0xffffffff) && eocd >= 20 &&
      le32(b, eocd - 20) == 0x07064b50) {  // ZIP64: the locator points at the real record
    const uint64_t record = le64(b, eocd - 20 + 8);
    if (!fits(record, 56, b.size()) || le32(b, record) != 0x06064b50)
      throw DataError(where + ": corrupt ZIP64 end of central directory");
    entries = le64(b, record + 32);
    directory = le64(b, record + 48);
  }
  std::vector<ZipMember> members;
  uint64_t at = directory;
  for (uint64_t i = 0; i < entries; ++i) {
    if (!fits(at, 46, b.size()) || le32(b, at) != 0x02014b50)
      throw DataError(where + ": corrupt ZIP central directory");
    ZipMember m;
    m.method = le16(b, at + 10);
    m.crc = le32(b, at + 16);
    m.compressed = le32(b, at + 20);
    m.size = le32(b, at + 24);
    const size_t nameLength = le16(b, at + 28), extraLength = le16(b, at + 30),
                 commentLength = le16(b, at + 32);
    m.offset = le32(b, at + 42);
    if (!fits(at, 46 + nameLength + extraLength, b.size()))
      throw DataError(where + ": corrupt ZIP central directory");
    m.name = b.substr(at + 46, nameLength);
    // ZIP64 extended information: the fields that overflowed, in order.
    size_t extra = at + 46 + nameLength;
    const size_t extraEnd = extra + extraLength;
    while (extra + 4 <= extraEnd) {
      const uint32_t id = le16(b, extra), length = le16(b, extra + 2);
      if (id == 0x0001) {
        size_t field = extra + 4;
        for (uint64_t* value : {&m.size, &m.compressed, &m.offset}) {
          if (*value == 0xffffffff && field + 8 <= std::min(extra + 4 + length, extraEnd)) {
            *value = le64(b, field);
            field += 8;
          }
        }
      }
      extra += 4 + length;
    }
    members.push_back(std::move(m));
    at += 46 + nameLength + extraLength + commentLength;
  }
  return members;
}

std::string zipContent(const std::string& b, const ZipMember& m, const std::string& where) {
  const std::string who = where + ": " + m.name;
  // Offsets as the file gives them: compared without sums that could wrap.
  if (m.offset > b.size() || b.size() - m.offset < 30 || le32(b, m.offset) != 0x04034b50)
    throw DataError(who + ": corrupt ZIP local header");
  const size_t start = m.offset + 30 + le16(b, m.offset + 26) + le16(b, m.offset + 28);
  if (start > b.size() || b.size() - start < m.compressed)
    throw DataError(who + ": truncated");
  std::string out;
  if (m.method == 0) {
    out = b.substr(start, m.compressed);
  } else if (m.method == 8) {
    // Deflate expands at most 1032 times: a declared size past that is a lie, not a reason to
    // allocate it.
    if (m.size / 1032 > m.compressed)
      throw DataError(who + ": corrupt (it declares " + std::to_string(m.size) + " bytes from " +
                      std::to_string(m.compressed) + " compressed)");
    out.resize(m.size);
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
      throw DataError(who + ": cannot start zlib");
    // zlib counts in 32 bits: a member past 4 GiB goes in and comes out in pieces.
    constexpr size_t kPiece = size_t{1} << 30;
    size_t in = 0, produced = 0;
    int rc = Z_OK;
    while (rc == Z_OK) {
      const size_t inNow = std::min(kPiece, m.compressed - in);
      const size_t outNow = std::min(kPiece, out.size() - produced);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(b.data() + start + in));
      z.avail_in = static_cast<uInt>(inNow);
      z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
      z.avail_out = static_cast<uInt>(outNow);
      rc = inflate(&z, Z_NO_FLUSH);
      in += inNow - z.avail_in;
      produced += outNow - z.avail_out;
      if (rc == Z_BUF_ERROR && (in < m.compressed && produced < out.size()))
        rc = Z_OK;  // a piece used up: go on with the next
      if (rc == Z_OK && inNow == z.avail_in && outNow == z.avail_out)
        break;  // no progress: the stream is cut
    }
    inflateEnd(&z);
    if (rc != Z_STREAM_END || produced != m.size)
      throw DataError(who + ": corrupt deflated data");
  } else {
    throw DataError(who + ": ZIP compression method " + std::to_string(m.method) +
                    " is not supported (stored or deflated)");
  }
  // crc32_z: crc32's length is 32 bits, and a member of 4 GiB or more was checked over its size
  // modulo 2^32 and refused as corrupt.
  const uLong crc =
      crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(out.data()), out.size());
  if (crc != m.crc)
    throw DataError(who + ": corrupt (CRC mismatch)");
  return out;
}

void addTensors(const c10::IValue& value, const std::string& name, NamedArrays& out,
                const std::string& where) {
  if (value.isTensor()) {
    out.emplace_back(name, value.toTensor());
    return;
  }
  throw DataError(where + ": \"" + name + "\" is a " + value.tagKind() + ", not a tensor");
}

// A gzip file's contents, of at most `most` bytes: with `whole`, a file that holds more is refused
// (what its header declared was a lie: deflate packs a thousand zeros in a byte, and a 10 MB file
// could fill 10 GB); without, its first `most` bytes are returned (a header to read first). The
// input goes to zlib in pieces: avail_in is 32 bits, and a file of 4 GiB or more was cut short.
std::string gunzip(const std::string& bytes, const std::string& where, size_t most, bool whole) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
    throw DataError(where + ": cannot start zlib");
  constexpr size_t kPiece = size_t{1} << 30;
  size_t in = 0;
  std::string out;
  char chunk[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (z.avail_in == 0 && in < bytes.size()) {
      const size_t now = std::min(kPiece, bytes.size() - in);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + in));
      z.avail_in = static_cast<uInt>(now);
      in += now;
    }
    z.next_out = reinterpret_cast<Bytef*>(chunk);
    z.avail_out = sizeof chunk;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(chunk, sizeof chunk - z.avail_out);
    if (rc == Z_BUF_ERROR && z.avail_in == 0 && in < bytes.size())
      rc = Z_OK;  // a piece used up: go on with the next
    if (out.size() > most) {
      inflateEnd(&z);
      if (whole)
        throw DataError(where + ": holds more than the " + std::to_string(most) +
                        " bytes its header declares");
      out.resize(most);
      return out;
    }
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END && (whole || out.size() < most))
    throw DataError(where + ": not a complete gzip file");
  return out;
}

uint32_t be32(const std::string& b, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(b[at])) << 24 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 1])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 2])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 3]));
}

}  // namespace

torch::Tensor readIdx(const std::filesystem::path& path) {
  const std::string where = path.string();
  std::string bytes = readBytes(path);
  const bool gzipped = path.extension() == ".gz";
  std::string packed;
  if (gzipped) {  // the header first (at most 255 dimensions), then what it declares
    packed = std::move(bytes);
    bytes = gunzip(packed, where, 4 + 4 * 255, /*whole=*/false);
  }
  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0)
    throw DataError(where + ": not an IDX file (no 0x0000 magic)");
  if (static_cast<unsigned char>(bytes[2]) != 0x08)
    throw DataError(where + ": IDX element type " + std::to_string(static_cast<int>(bytes[2])) +
                    " is not supported (unsigned bytes, 0x08)");
  const int dims = static_cast<unsigned char>(bytes[3]);
  if (bytes.size() < 4 + 4 * static_cast<size_t>(dims))
    throw DataError(where + ": truncated IDX header");
  std::vector<int64_t> shape;
  int64_t count = 1;
  for (int d = 0; d < dims; ++d) {
    shape.push_back(be32(bytes, 4 + 4 * static_cast<size_t>(d)));
    if (shape.back() != 0 && count > std::numeric_limits<int64_t>::max() / shape.back())
      throw DataError(where + ": its dimensions hold more values than int64 counts");
    count *= shape.back();
  }
  const size_t start = 4 + 4 * static_cast<size_t>(dims);
  if (gzipped)
    bytes = gunzip(packed, where, start + static_cast<size_t>(count), /*whole=*/true);
  if (bytes.size() - start > static_cast<size_t>(count))
    throw DataError(where + ": " +
                    std::to_string(bytes.size() - start - static_cast<size_t>(count)) +
                    " bytes beyond the " + std::to_string(count) + " its header declares");
  if (bytes.size() - start < static_cast<size_t>(count))
    throw DataError(where + ": truncated: " + std::to_string(count) + " bytes of data expected, " +
                    std::to_string(bytes.size() - start) + " found");
  torch::Tensor t = torch::empty(shape, torch::kUInt8);
  std::memcpy(t.data_ptr(), bytes.data() + start, static_cast<size_t>(count));
  return t;
}

NamedArrays readMnist(const std::filesystem::path& folder) {
  const auto file = [&](const std::string& name) {
    for (const std::string& candidate : {name, name + ".gz"}) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(folder / candidate, ec))
        return folder / candidate;
    }
    throw DataError(folder.string() + ": no " + name + " (nor " + name +
                    ".gz): an MNIST folder holds its IDX files");
  };
  const torch::Tensor images = readIdx(file("train-images-idx3-ubyte"));
  const torch::Tensor labels = readIdx(file("train-labels-idx1-ubyte"));
  if (images.dim() != 3 || labels.dim() != 1 || images.size(0) != labels.size(0))
    throw DataError(folder.string() +
                    ": MNIST's images [N, rows, columns] and labels [N] "
                    "disagree");
  return {{"images", images.unsqueeze(1).to(torch::kFloat).div_(255)},
          {"labels", labels.to(torch::kLong)}};
}

NamedArrays readCifar10(const std::filesystem::path& fileOrFolder) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  if (std::filesystem::is_directory(fileOrFolder, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(fileOrFolder, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("data_batch_", 0) == 0 && entry.path().extension() == ".bin")
        files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty())
      throw DataError(fileOrFolder.string() + ": no data_batch_*.bin (CIFAR-10's binary batches)");
  } else {
    files.push_back(fileOrFolder);
  }
  constexpr size_t kRecord = 1 + 3 * 32 * 32;
  std::vector<torch::Tensor> images, labels;
  for (const auto& path : files) {
    const std::string bytes = readBytes(path);
    if (bytes.empty() || bytes.size() % kRecord != 0)
      throw DataError(path.string() + ": " + std::to_string(bytes.size()) +
                      " bytes is not a whole number of CIFAR-10 records (3073 bytes each)");
    const auto n = static_cast<int64_t>(bytes.size() / kRecord);
    torch::Tensor records = torch::empty({n, static_cast<int64_t>(kRecord)}, torch::kUInt8);
    std::memcpy(records.data_ptr(), bytes.data(), bytes.size());
    labels.push_back(records.select(1, 0).to(torch::kLong));
    images.push_back(records.narrow(1, 1, 3 * 32 * 32).reshape({n, 3, 32, 32}));
  }
  const torch::Tensor label = torch::cat(labels);
  if (label.max().item<int64_t>() > 9)
    throw DataError(fileOrFolder.string() + ": a label above 9: not CIFAR-10's binary format");
  return {{"images", torch::cat(images).to(torch::kFloat).div_(255)}, {"labels", label}};
}

torch::Tensor parseNpy(const std::string& bytes, const std::string& where) {
  return npyTensor(bytes, where);
}

torch::Tensor readNpy(const std::filesystem::path& path) {
  return parseNpy(readBytes(path), path.string());
}

NamedArrays readNpz(const std::filesystem::path& path) {
  const std::string bytes = readBytes(path);
  const std::string where = path.string();
  NamedArrays arrays;
  for (const ZipMember& m : zipDirectory(bytes, where)) {
    const std::string suffix = ".npy";
    if (m.name.size() <= suffix.size() ||
        m.name.compare(m.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;  // not an array (numpy writes nothing else)
    std::string name = m.name.substr(0, m.name.size() - suffix.size());
    // numpy.load keeps the last of two members of one name; reading the first would train on
    // the other array without a word.
    if (std::any_of(arrays.begin(), arrays.end(), [&](const auto& a) { return a.first == name; }))
      throw DataError(where + ": holds two arrays named \"" + name +
                      "\" (an archive appended to): rewrite it with numpy.savez");
    arrays.emplace_back(std::move(name),
                        parseNpy(zipContent(bytes, m, where), where + ": " + m.name));
  }
  if (arrays.empty())
    throw DataError(where + ": an .npz archive without arrays");
  return arrays;
}

NamedArrays readTorchFile(const std::filesystem::path& path) {
  const std::string bytes = readBytes(path);
  const std::string where = path.string();
  // torch.jit.save's archives hold code; torch.save's hold data.pkl and the tensors' storages.
  bool script = false;
  if (bytes.size() >= 4 && le32(bytes, 0) == 0x04034b50) {
    for (const ZipMember& m : zipDirectory(bytes, where))
      script = script || m.name.find("/code/") != std::string::npos ||
               m.name.find("/constants.pkl") != std::string::npos;
  }
  NamedArrays arrays;
  if (script) {
    torch::jit::Module module;
    try {
      module = torch::jit::load(path.string(), torch::kCPU);  // Note [Saved on a GPU]
    } catch (const c10::Error& e) {
      throw DataError(where + ": not a loadable TorchScript archive: " +
                      std::string(e.what_without_backtrace()).substr(0, 200));
    } catch (const std::exception& e) {  // its code does not compile (torch::jit::ErrorReport)
      std::string why = e.what();
      why = why.substr(0, why.find('\n'));
      throw DataError(where + ": not a loadable TorchScript archive: its code does not compile (" +
                      why.substr(0, 200) + ")");
    }
    for (const auto& attribute : module.named_attributes(/*recurse=*/true)) {
      if (attribute.value.isTensor())
        arrays.emplace_back(attribute.name, attribute.value.toTensor());
    }
    if (arrays.empty())
      throw DataError(where + ": a TorchScript module without tensor attributes");
    return arrays;
  }
  // Note [Saved on a GPU]: a tensor saved from a GPU names its device, and LibTorch's loaders put
  // it back there — on a machine without one the file was refused ("Found no NVIDIA driver"), on
  // one with it the arrays stayed on the GPU and the first batch's gather failed. Batches are
  // built on the CPU (data_source.h): every storage is read onto it. This is torch::pickle_load,
  // given the device that function leaves out.
  c10::IValue value;
  try {
    std::istringstream in(bytes);
    caffe2::serialize::PyTorchStreamReader reader(&in);
    value = torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                              std::nullopt, std::nullopt,
                                              torch::Device(torch::kCPU), reader);
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    throw DataError(where + ": not readable as torch.save's output (" + why + ")");
  }
  if (value.isTensor()) {
    addTensors(value, "0", arrays, where);
  } else if (value.isTuple()) {
    const auto& elements = value.toTupleRef().elements();
    for (size_t i = 0; i < elements.size(); ++i)
      addTensors(elements[i], std::to_string(i), arrays, where);
  } else if (value.isList()) {
    const auto list = value.toListRef();
    for (size_t i = 0; i < list.size(); ++i)
      addTensors(list[i], std::to_string(i), arrays, where);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      const c10::IValue& key = entry.key();
      const std::string name = key.isString() ? key.toStringRef()
                               : key.isInt()  ? std::to_string(key.toInt())
                                              : std::string(key.tagKind());
      addTensors(entry.value(), name, arrays, where);
    }
  } else {
    throw DataError(where + ": holds a " + value.tagKind() +
                    "; expected a tensor, or a tuple, list or dict of tensors");
  }
  if (arrays.empty())
    throw DataError(where + ": holds no tensors");
  return arrays;
}

CsvTable readCsv(const std::filesystem::path& path) {
  const std::string bytes = readBytes(path);
  const std::string where = path.string();
  const auto fields = [](const std::string& line) {
    std::vector<std::string> out;
    std::string field;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        out.push_back(field);
        field.clear();
      } else if (c != '\r') {
        field += c;
      }
    }
    out.push_back(field);
    for (auto& f : out) {
      const size_t b = f.find_first_not_of(" \t"), e = f.find_last_not_of(" \t");
      f = b == std::string::npos ? "" : f.substr(b, e - b + 1);
    }
    return out;
  };
  // A UTF-8 byte-order mark (spreadsheets write one) is not part of the first column's name.
  const bool bom = bytes.rfind("\xEF\xBB\xBF", 0) == 0;
  std::istringstream in(bom ? bytes.substr(3) : bytes);
  std::string line;
  size_t lineNumber = 0;
  CsvTable table;
  std::vector<double> values;
  int64_t rows = 0;
  while (std::getline(in, line)) {
    ++lineNumber;
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    std::vector<std::string> row = fields(line);
    if (table.columns.empty()) {
      // A name twice (spreadsheets allow it) would read the first column for both.
      for (size_t c = 0; c < row.size(); ++c) {
        if (!row[c].empty() && std::find(row.begin(), row.begin() + c, row[c]) != row.begin() + c)
          throw DataError(
              where + ":" + std::to_string(lineNumber) + ": column \"" + row[c] +
              "\" is named twice in the header (columns " +
              std::to_string(std::find(row.begin(), row.end(), row[c]) - row.begin() + 1) +
              " and " + std::to_string(c + 1) + ")");
      }
      table.columns = std::move(row);
      continue;
    }
    if (row.size() != table.columns.size())
      throw DataError(where + ":" + std::to_string(lineNumber) + ": " + std::to_string(row.size()) +
                      " fields, the header has " + std::to_string(table.columns.size()));
    for (size_t c = 0; c < row.size(); ++c) {
      const char* text = row[c].c_str();
      char* end = nullptr;
      const double v = std::strtod(text, &end);
      if (row[c].empty() || end == text || *end != '\0')
        throw DataError(where + ":" + std::to_string(lineNumber) + ": column \"" +
                        table.columns[c] + "\": \"" + row[c] + "\" is not a number");
      if (!std::isfinite(v))  // a missing value written as nan: every loss would be NaN
        throw DataError(where + ":" + std::to_string(lineNumber) + ": column \"" +
                        table.columns[c] + "\": \"" + row[c] +
                        "\" is not a finite number (fill or drop the row)");
      values.push_back(v);
    }
    ++rows;
  }
  if (table.columns.empty())
    throw DataError(where + ": an empty CSV file (a header row of column names comes first)");
  if (rows == 0)
    throw DataError(where + ": a CSV file with a header and no rows");
  table.values = torch::tensor(values, torch::kDouble)
                     .reshape({rows, static_cast<int64_t>(table.columns.size())});
  return table;
}

std::string arrayNames(const NamedArrays& arrays) {
  std::string out;
  for (const auto& [name, tensor] : arrays)
    out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace symtune
