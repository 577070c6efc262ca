// Session file validation: valid files parse with their defaults; every kind of mistake is
// refused with a message naming the file, the field and what was expected.

#include "doctest_text.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "error_of.h"
#include "symtune/core/session.h"
#include "test_files.h"

using symtune::Session;
using symtune::SessionError;

namespace {
const std::filesystem::path kOrigin = "/sessions/s.json";

// A valid session with `patch` applied as text replacements of the valid body.
std::string sessionText(const std::string& model = R"("model": {"zoo": "dynamic_resnet"})",
                        const std::string& extra = "") {
  return R"({"format": "symtune-session", "version": 1, )" + model + extra + "}";
}

struct RejectedSession {
  const char* name;
  std::string text;
  std::string message;  // what follows "<file>: " in the error
};

std::vector<RejectedSession> rejectedSessions() {
  return {
      {"not JSON", "{\"format\": \n  ,}", "not valid JSON at line 2, column 3"},
      {"not an object", "[1, 2]", "expected a JSON object at the top, found an array of 2 values"},
      {"missing format", R"({"version": 1})", "format: missing (required)"},
      {"wrong format", R"({"format": "other", "version": 1})",
       "format: expected \"symtune-session\", found \"other\""},
      {"wrong version", R"({"format": "symtune-session", "version": 2, "model": {}})",
       "version: unsupported session version 2 (this Symtune reads version 1)"},
      {"version of wrong type", R"({"format": "symtune-session", "version": "1"})",
       "version: expected an integer, found a string"},
      {"missing model", R"({"format": "symtune-session", "version": 1})",
       "model: missing (required)"},
      {"model of wrong type", sessionText(R"("model": 3)"),
       "model: expected an object, found an integer"},
      {"neither zoo nor file", sessionText(R"("model": {})"),
       "model: missing \"zoo\" (a bundled model) or \"file\" (a TorchScript archive)"},
      {"unknown zoo model", sessionText(R"("model": {"zoo": "vgg"})"),
       "model.zoo: unknown zoo model \"vgg\" (known: dynamic_resnet, transformer_xl, "
       "dynamic_tagger, moe_topk, early_exit, tree_rnn)"},
      {"unknown preset", sessionText(R"("model": {"zoo": "dynamic_resnet", "preset": "xl"})"),
       "model.preset: expected one of ci, cpu, gpu, found \"xl\""},
      {"unknown top-level field",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "stepz": 3)"),
       "stepz: unknown field (known here: format, version, name, model, data, loss, optimizer, "
       "run, rules, binding, remat, control)"},
      {"remat without a budget",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "remat": {})"),
       "remat.budget_mb: the planner needs a budget: budget_mb or budget_fraction"},
      {"remat fraction above one",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                   R"(, "remat": {"budget_fraction": 1.5})"),
       "remat.budget_fraction: expected a share of the plain peak in (0, 1], found 1.5"},
      // Said with the digits it needs: "found 1" refused what looked allowed.
      {"remat fraction just above one",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                   R"(, "remat": {"budget_fraction": 1.0000001})"),
       "remat.budget_fraction: expected a share of the plain peak in (0, 1], found 1.0000001"},
      {"remat budget zero",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "remat": {"budget_mb": 0})"),
       "remat.budget_mb: expected a number of MB in (0, 1e9], found 0"},
      {"remat budget past an int64 of bytes",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "remat": {"budget_mb": 1e300})"),
       "remat.budget_mb: expected a number of MB in (0, 1e9], found 1e+300"},
      {"remat both budgets",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                   R"(, "remat": {"budget_mb": 10, "budget_fraction": 0.5})"),
       "remat.budget_fraction: give budget_mb or budget_fraction, not both"},
      {"remat checkpoint with a fraction",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                   R"(, "remat": {"budget_fraction": 0.5, "strategy": "checkpoint"})"),
       "remat.budget_fraction: the checkpoint strategy takes budget_mb (it runs no plain step to "
       "measure what the fraction is of)"},
      {"remat plain peak without a fraction",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                   R"(, "remat": {"budget_mb": 10, "plain_peak_mb": 20})"),
       "remat.plain_peak_mb: is what budget_fraction is a share of: give budget_fraction"},
      {"remat plain peak zero",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                   R"(, "remat": {"budget_fraction": 0.5, "plain_peak_mb": 0})"),
       "remat.plain_peak_mb: expected a number of MB in (0, 1e9], found 0"},
      {"remat unknown strategy",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                   R"(, "remat": {"budget_fraction": 0.5, "strategy": "dtr"})"),
       "remat.strategy: expected \"plan\", \"checkpoint\" or \"selective\", found \"dtr\""},
      {"remat selective with a fraction",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                   R"(, "remat": {"budget_fraction": 0.5, "strategy": "selective"})"),
       "remat.budget_fraction: the selective strategy takes budget_mb (it runs no plain step to "
       "measure what the fraction is of)"},
      {"control micro-batches zero",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})", R"(, "control": {"microbatches": 0})"),
       "control.microbatches: expected a number of micro-batches from 1 to 1024, found 0"},
      {"control unknown mode",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})", R"(, "control": {"mode": "online!"})"),
       "control.mode: expected \"fixed\", \"online\" or \"tuned\", found \"online!\""},
      {"control unknown field",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})", R"(, "control": {"modes": 1})"),
       "control.modes: unknown field (known here: mode, microbatches, split_on_overrun, threads, "
       "remat_budget, binding_explore, conservative, warmup_steps, horizon, shift_run, explore, "
       "tuned)"},
      {"control horizon of one step",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})", R"(, "control": {"horizon": 1})"),
       "control.horizon: expected the steps the controller remembers, 0 (all alike) or from 2 to "
       "1e9, found 1"},
      {"control shift run of one step",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})", R"(, "control": {"shift_run": 1})"),
       "control.shift_run: expected the steps in a row that make the controller believe a speed "
       "moved, 0 (never) or from 2 to 16, found 1"},
      {"control explore elsewhere",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})", R"(, "control": {"explore": "far"})"),
       "control.explore: expected \"around_leader\" or \"outward\", found \"far\""},
      {"control conservative of 1",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})", R"(, "control": {"conservative": 1})"),
       "control.conservative: expected the share of the first configuration's throughput to keep, "
       "in [0, 1) (0: explore freely), found 1"},
      {"control negative warm-up",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})", R"(, "control": {"warmup_steps": -1})"),
       "control.warmup_steps: expected a number of steps from 0 to 1000000, found -1"},
      {"control binding_explore without binding",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})",
                   R"(, "binding": {"enabled": false}, "control": {"binding_explore": false})"),
       "control.binding_explore: needs a binder that measures: binding on, with a measuring "
       "budget, and no remat block but one with bind true (without it binding is off)"},
      {"remat bind without binding",
       sessionText(R"("model": {"zoo": "tree_rnn"})",
                   R"(, "binding": {"enabled": false}, "remat": {"budget_mb": 2, "bind": true})"),
       "remat.bind: needs binding on (binding.enabled)"},
      {"control binding_explore under remat",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})",
                   R"(, "remat": {"budget_fraction": 0.5}, "control": {"binding_explore": true})"),
       "control.binding_explore: needs a binder that measures: binding on, with a measuring "
       "budget, and no remat block but one with bind true (without it binding is off)"},
      {"control remat budget without a fraction",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})",
                   R"(, "control": {"remat_budget": 0.5})"),
       "control.remat_budget: needs remat.budget_fraction, the run's limit it tightens"},
      {"control remat budget above the fraction",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})",
                   R"(, "remat": {"budget_fraction": 0.5}, "control": {"remat_budget": 0.6})"),
       "control.remat_budget: expected at most remat.budget_fraction 0.5, found 0.6"},
      {"control negative threads",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})", R"(, "control": {"threads": -1})"),
       "control.threads: expected a number of threads from 0 (as run.threads) to 1024, found -1"},
      {"binding budget negative",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "binding": {"budget": -1})"),
       "binding.budget: expected a non-negative integer or null, found -1"},
      {"binding repetitions zero",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "binding": {"repetitions": 0})"),
       "binding.repetitions: expected an integer in [1, 100], found 0"},
      {"binding memory slack one",
       sessionText(R"("model": {"zoo": "early_exit"})", R"(, "binding": {"memory_slack": 1})"),
       "binding.memory_slack: expected a share of the sites' time in [0, 1), found 1"},
      {"binding table a number",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "binding": {"table": 3})"),
       "binding.table: expected a string, found an integer"},
      {"steps of wrong type",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "run": {"steps": "10"})"),
       "run.steps: expected an integer, found a string"},
      {"negative steps",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "run": {"steps": -3})"),
       "run.steps: expected a positive integer, found -3"},
      {"a key twice",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                   R"(, "run": {"steps": 5, "threads": 1, "steps": 50})"),
       "run.steps: given twice in one object (JSON keeps only the last): say it once"},
      {"a block twice",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                   R"(, "run": {"steps": 5}, "data": {"seed": 1}, "run": {"steps": 6})"),
       "run: given twice in one object (JSON keeps only the last): say it once"},
      {"steps past an int64",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                   R"(, "run": {"steps": 9223372036854775808})"),
       "run.steps: integer out of range"},
      {"unknown device",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "run": {"device": "tpu"})"),
       "run.device: expected one of cpu, cuda, auto, found \"tpu\""},
      {"unknown cpu memory",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "run": {"cpu_memory": "cache"})"),
       "run.cpu_memory: expected one of retain, system, found \"cache\""},
      {"nvtx not a boolean",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "run": {"nvtx": 1})"),
       "run.nvtx: expected true or false, found an integer"},
      {"lr not a number",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "optimizer": {"lr": true})"),
       "optimizer.lr: expected a number, found a boolean"},
      {"lr past float",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "optimizer": {"lr": 1e308})"),
       "optimizer.lr: expected a positive number (at most float's 3.4e38), found 1e+308"},
      {"momentum without sgd",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "optimizer": {"momentum": 0.9})"),
       "optimizer.momentum: only the sgd optimizer takes a momentum"},
      {"file model without inputs", sessionText(R"("model": {"file": "m.pt", "classes": 3})"),
       "model.inputs: missing (required)"},
      {"input dimension not positive",
       sessionText(R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4, 0]}]})"),
       "model.inputs[0].shape[1]: expected a positive integer, found 0"},
      {"unknown input dtype",
       sessionText(
           R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4], "dtype": "int8"}]})"),
       "model.inputs[0].dtype: expected one of float32, float64, int64, found \"int8\""},
      {"one class",
       sessionText(R"("model": {"file": "m.pt", "classes": 1, "inputs": [{"shape": [4]}]})"),
       "model.classes: expected an integer of at least 2 (classes), found 1"},
      {"no outputs under mse",
       sessionText(R"("model": {"file": "m.pt", "classes": 0, "inputs": [{"shape": [4]}]})",
                   R"(, "loss": {"kind": "mse"})"),
       "model.classes: expected an integer of at least 1 (output values), found 0"},
      {"unknown data format",
       sessionText(R"("model": {"file": "m.pt", "classes": 3})",
                   R"(, "data": {"format": "parquet", "file": "d", "target": "y"})"),
       "data.format: expected one of npy, npz, torch, csv, mnist, cifar10, images, found "
       "\"parquet\""},
      {"data files for a zoo model",
       sessionText(
           R"("model": {"zoo": "dynamic_resnet"})",
           R"(, "data": {"format": "npz", "file": "d.npz", "inputs": ["x"], "target": "y"})"),
       "data.format: the zoo's models bring their own data; data files need a model file"},
      {"selective recomputation of a bound run",
       sessionText(R"("model": {"zoo": "transformer_xl"})",
                   R"(, "remat": {"strategy": "selective", "bind": true})"),
       "remat.strategy: \"selective\" recomputes runs of ops, which a bound step keeps whole: "
       "with remat.bind it would recompute nothing (use \"plan\" or \"checkpoint\", or leave "
       "remat.bind off)"},
      {"data files for a zoo model, their target left out",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})",
                   R"(, "data": {"format": "npz", "file": "x"})"),
       "data.format: the zoo's models bring their own data; data files need a model file"},
      {"data files without a batch size",
       sessionText(
           R"("model": {"file": "m.pt", "classes": 3})",
           R"(, "data": {"format": "npz", "file": "d.npz", "inputs": ["x"], "target": "y"})"),
       "data.batch_size: missing: with data files and no model.inputs it is required"},
      {"npz without inputs",
       sessionText(R"("model": {"file": "m.pt", "classes": 3})",
                   R"(, "data": {"format": "npz", "file": "d.npz", "target": "y"})"),
       "data.inputs: missing: the arrays the model's forward takes, in order"},
      {"npy with a file",
       sessionText(R"("model": {"file": "m.pt", "classes": 3})",
                   R"(, "data": {"format": "npy", "file": "d.npy", "target": "y"})"),
       "data.file: npy arrays are one per file: name the files in data.inputs and data.target"},
      {"data fields without a format",
       sessionText(R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4]}]})",
                   R"(, "data": {"target": "y"})"),
       "data.target: needs data.format (npy, npz, torch, csv, mnist, cifar10 or images): without "
       "it the data is synthetic"},
      {"an input name not a string",
       sessionText(R"("model": {"file": "m.pt", "classes": 3})",
                   R"(, "data": {"format": "npz", "file": "d.npz", "inputs": [3], "target": "y"})"),
       "data.inputs[0]: expected the name of an array, found an integer"},
      {"validation everything",
       sessionText(R"("model": {"file": "m.pt", "classes": 3})",
                   R"(, "data": {"format": "csv", "file": "d.csv", "target": "y",
                                 "batch_size": 4, "validation_fraction": 1})"),
       "data.validation_fraction: expected a number in [0, 1)"},
      {"lengths of CSV rows",
       sessionText(R"("model": {"file": "m.pt", "classes": 3})",
                   R"(, "data": {"format": "csv", "file": "d.csv", "target": "y",
                                 "batch_size": 4, "lengths": "x3"})"),
       "data.lengths: CSV data has no sequences to cut: its inputs are rows of numbers of one "
       "width"},
      {"bucketing without lengths",
       sessionText(R"("model": {"file": "m.pt", "classes": 3})",
                   R"(, "data": {"format": "npz", "file": "d.npz", "inputs": ["x"], "target": "y",
                                 "batch_size": 4, "bucket_by_length": true})"),
       "data.bucket_by_length: needs data.lengths, the lengths it buckets by"},
      {"unknown loss",
       sessionText(R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4]}]})",
                   R"(, "loss": {"kind": "hinge"})"),
       "loss.kind: expected one of cross_entropy, nll, mse, l1, smooth_l1, bce_with_logits, "
       "found \"hinge\""},
      {"label smoothing under nll",
       sessionText(R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4]}]})",
                   R"(, "loss": {"kind": "nll", "label_smoothing": 0.1})"),
       "loss.label_smoothing: applies to cross_entropy only, not nll"},
      {"an output that is neither a position nor a key",
       sessionText(
           R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4]}], "output": -1})"),
       "model.output: expected a position (0, 1, ...) or a key, found -1"},
      {"an output position past int64",
       sessionText(R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4]}],
                                "output": 18446744073709551615})"),
       "model.output: integer out of range"},
      {"auxiliary outputs without the main one",
       sessionText(R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4]}],
                                "auxiliary_outputs": [{"output": 1}]})"),
       "model.auxiliary_outputs: needs model.output, the main output among those the forward "
       "returns"},
      {"an auxiliary output that is the main one",
       sessionText(R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4]}],
                                "output": "logits",
                                "auxiliary_outputs": [{"output": "logits", "weight": 0.3}]})"),
       "model.auxiliary_outputs[0].output: is model.output, the main output"},
      {"an auxiliary weight of zero",
       sessionText(R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4]}],
                                "output": 0, "auxiliary_outputs": [{"output": 1, "weight": 0}]})"),
       "model.auxiliary_outputs[0].weight: expected a positive number"},
      {"the forward as the loss method",
       sessionText(R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4]}]})",
                   R"(, "loss": {"method": "forward"})"),
       "loss.method: expected the name of the model's loss method (not forward), found "
       "\"forward\""},
      {"a loss method for a zoo model",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "loss": {"method": "loss"})"),
       "loss.method: the zoo's models have no loss method; it needs a model file"},
      {"checkpoint_every without a checkpoint",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "run": {"checkpoint_every": 5})"),
       "run.checkpoint_every: needs run.checkpoint, the file it writes"},
      {"an image block for npz",
       sessionText(R"("model": {"file": "m.pt", "classes": 3})",
                   R"(, "data": {"format": "npz", "file": "d.npz", "inputs": ["x"], "target": "y",
                                 "batch_size": 4, "image": {"channels": 3}})"),
       "data.image: applies to data.format \"images\" only"},
      {"images of two channels",
       sessionText(R"("model": {"file": "m.pt", "classes": 3})",
                   R"(, "data": {"format": "images", "file": "pictures", "batch_size": 4,
                                 "image": {"channels": 2}})"),
       "data.image.channels: expected 1 (grey) or 3 (RGB), found 2"},
      {"a crop larger than the resize",
       sessionText(R"("model": {"file": "m.pt", "classes": 3})",
                   R"(, "data": {"format": "images", "file": "pictures", "batch_size": 4,
                                 "image": {"resize": [32, 32], "crop": 40}})"),
       "data.image.crop: is larger than the resized image"},
      {"a mean per channel missing",
       sessionText(R"("model": {"file": "m.pt", "classes": 3})",
                   R"(, "data": {"format": "images", "file": "pictures", "batch_size": 4,
                                 "image": {"mean": [0.5]}})"),
       "data.image.mean: expected 3 numbers (one per channel), found an array of 1 value"},
      {"a regression loss for a zoo model",
       sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "loss": {"kind": "l1"})"),
       "loss.kind: the zoo's models are classifiers returning logits: expected cross_entropy, "
       "found \"l1\""},
      {"nll for a zoo model",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})", R"(, "loss": {"kind": "nll"})"),
       "loss.kind: the zoo's models are classifiers returning logits: expected cross_entropy, "
       "found \"nll\" (which takes log-probabilities)"},
      {"another padding target for a zoo model",
       sessionText(R"("model": {"zoo": "dynamic_tagger"})", R"(, "loss": {"ignore_index": 0})"),
       "loss.ignore_index: the zoo's models pad their targets with -100: expected -100, found 0"},
  };
}
}  // namespace

TEST_CASE("a written session names the files in its folder relative to it, others as they are") {
  // /sessions/s.json: the model, the arrays and what the run writes lie in /sessions; the
  // checkpoint is elsewhere. Written absolute, the folder could not move (symtune tune rewrites
  // the session it tuned; the studio saves one under another name).
  const Session s = symtune::parseSession(
      sessionText(R"("model": {"file": "m.pt", "classes": 3})",
                  R"(, "data": {"format": "npy", "inputs": ["arrays/x.npy"], "target": "y.npy",
                                "batch_size": 4},
                     "run": {"save": "out/trained.pt", "checkpoint": "/scratch/run.ckpt"},
                     "binding": {"table": "s.tables.json"})"),
      kOrigin);
  const auto fields = [](const Session& session) {
    const nlohmann::json j = nlohmann::json::parse(symtune::sessionJson(session));
    return std::vector<std::string>{j["model"]["file"],     j["data"]["inputs"][0],
                                    j["data"]["target"],    j["run"]["save"],
                                    j["run"]["checkpoint"], j["binding"]["table"]};
  };
  CHECK(fields(s) == std::vector<std::string>{"m.pt", "arrays/x.npy", "y.npy", "out/trained.pt",
                                              "/scratch/run.ckpt", "s.tables.json"});
  const Session again = symtune::parseSession(symtune::sessionJson(s), kOrigin);
  CHECK(again.model.file == s.model.file);
  CHECK(again.data.files.inputs == s.data.files.inputs);
  CHECK(again.data.files.target == s.data.files.target);
  CHECK(again.run.save == s.run.save);
  CHECK(again.run.checkpoint == s.run.checkpoint);
  CHECK(symtune::bindingTablePath(again) == symtune::bindingTablePath(s));

  // Written for a file in another folder, the same files: there, by their full paths.
  Session elsewhere = s;
  elsewhere.path = "/other/s.json";
  CHECK(fields(elsewhere) == std::vector<std::string>{"/sessions/m.pt", "/sessions/arrays/x.npy",
                                                      "/sessions/y.npy", "/sessions/out/trained.pt",
                                                      "/scratch/run.ckpt",
                                                      "/sessions/s.tables.json"});
  CHECK(symtune::parseSession(symtune::sessionJson(elsewhere), elsewhere.path).model.file ==
        s.model.file);
}

TEST_CASE("a minimal zoo session takes the defaults") {
  const Session s = symtune::parseSession(sessionText(), kOrigin);
  CHECK(s.name == "s");  // the file's stem
  CHECK(s.model.zoo == "dynamic_resnet");
  CHECK(s.model.preset == "ci");
  CHECK(!s.data.batchSize.has_value());
  CHECK(s.optimizer.name == "adamw");
  // Qt Test's fuzzy tolerance for doubles; doctest's default would let 1.01e-3 pass for 1e-3.
  CHECK(s.optimizer.lr == doctest::Approx(1e-3).epsilon(1e-12));
  CHECK(s.run.steps == 100);
  CHECK(s.run.device == "cpu");
  CHECK(s.run.gpuTrace);
  CHECK(!s.run.nvtx);
  CHECK(s.run.cpuMemory == "system");
}

TEST_CASE("binding: on by default, its table beside the session unless it says otherwise") {
  const Session plain = symtune::parseSession(sessionText(), kOrigin);
  CHECK(plain.binding.enabled);
  CHECK(!plain.binding.budget.has_value());
  CHECK(plain.binding.repetitions == 3);
  CHECK(plain.binding.save);
  CHECK_FALSE(plain.binding.exact);
  CHECK(plain.binding.memorySlack == 0);
  CHECK(symtune::bindingTablePath(plain) == std::filesystem::path("/sessions/s.bindings.json"));

  const Session set = symtune::parseSession(
      sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                  R"(, "binding": {"enabled": false, "budget": 12, "repetitions": 5,
                                   "exact": true, "memory_slack": 0.25,
                                   "table": "../tables/t.json", "save": false})"),
      kOrigin);
  CHECK(!set.binding.enabled);
  REQUIRE(set.binding.budget.has_value());
  CHECK(*set.binding.budget == 12);
  CHECK(set.binding.repetitions == 5);
  CHECK(set.binding.exact);
  CHECK(!set.binding.save);
  CHECK(symtune::bindingTablePath(set) == std::filesystem::path("/tables/t.json"));
  const Session again = symtune::parseSession(symtune::sessionJson(set), kOrigin);
  CHECK(symtune::bindingTablePath(again) == std::filesystem::path("/tables/t.json"));
  CHECK(*again.binding.budget == 12);
  CHECK(again.binding.exact);
  CHECK(set.binding.memorySlack == 0.25);
  CHECK(again.binding.memorySlack == 0.25);

  const Session none = symtune::parseSession(
      sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "binding": {"table": null})"),
      kOrigin);
  CHECK(symtune::bindingTablePath(none).empty());
  CHECK(symtune::bindingTablePath(symtune::parseSession(symtune::sessionJson(none), kOrigin))
            .empty());
  // Parsed from text, without a file: nowhere to keep a table.
  CHECK(symtune::bindingTablePath(symtune::parseSession(sessionText(), "")).empty());
}

TEST_CASE("control: off unless the session has the block; written back as read") {
  const Session plain = symtune::parseSession(sessionText(), kOrigin);
  CHECK_FALSE(plain.control.enabled);
  CHECK(plain.control.microbatches == 1);
  CHECK_FALSE(symtune::parseSession(symtune::sessionJson(plain), kOrigin).control.enabled);
  const Session split = symtune::parseSession(
      sessionText(R"("model": {"zoo": "dynamic_tagger"})",
                  R"(, "control": {"microbatches": 4, "split_on_overrun": false})"),
      kOrigin);
  CHECK(split.control.enabled);
  CHECK(split.control.microbatches == 4);
  CHECK_FALSE(split.control.splitOnOverrun);
  const Session again = symtune::parseSession(symtune::sessionJson(split), kOrigin);
  CHECK(again.control.enabled);
  CHECK(again.control.microbatches == 4);
  CHECK_FALSE(again.control.splitOnOverrun);
  const Session defaults = symtune::parseSession(
      sessionText(R"("model": {"zoo": "dynamic_tagger"})", R"(, "control": {})"), kOrigin);
  CHECK(defaults.control.enabled);
  CHECK(defaults.control.splitOnOverrun);
  CHECK(defaults.control.mode == "fixed");
  CHECK(defaults.control.conservative == 0);
  CHECK(defaults.control.warmupSteps == 30);
  CHECK(defaults.control.explore == "around_leader");
  CHECK_FALSE(defaults.control.horizon.has_value());  // the controller's own default
  CHECK(symtune::sessionJson(defaults).find("horizon") == std::string::npos);
  CHECK_FALSE(defaults.control.shiftRun.has_value());
  CHECK(symtune::sessionJson(defaults).find("shift_run") == std::string::npos);
  const Session free = symtune::parseSession(
      symtune::sessionJson(symtune::parseSession(
          sessionText(R"("model": {"zoo": "dynamic_tagger"})",
                      R"(, "control": {"mode": "online", "conservative": 0.9, "warmup_steps": 5,
                          "explore": "outward", "horizon": 40, "shift_run": 0})"),
          kOrigin)),
      kOrigin);
  CHECK(free.control.conservative == 0.9);
  CHECK(free.control.warmupSteps == 5);
  CHECK(free.control.explore == "outward");
  CHECK(free.control.horizon == std::optional<double>(40));
  CHECK(free.control.shiftRun == std::optional<int>(0));  // off, and written so
  const Session online =
      symtune::parseSession(symtune::sessionJson(symtune::parseSession(
                                sessionText(R"("model": {"zoo": "dynamic_tagger"})",
                                            R"(, "control": {"mode": "online"})"),
                                kOrigin)),
                            kOrigin);
  CHECK(online.control.mode == "online");
  // What `symtune tune` writes: the configuration and the search's figures, read back as written.
  const Session tuned = symtune::parseSession(
      sessionText(R"("model": {"zoo": "dynamic_tagger"})",
                  R"(, "remat": {"budget_fraction": 0.6}, "control": {"mode": "tuned",
                     "microbatches": 2, "threads": 1, "remat_budget": 0.5,
                     "tuned": {"evaluations": 12, "configurations": 48, "steps": 60,
                               "seconds": 81.5, "samples_per_s": 912.5,
                               "start": "microbatches 1, threads 2, remat_budget 0.6",
                               "start_samples_per_s": 700, "runner_up": "microbatches 4",
                               "runner_up_samples_per_s": 900, "stopped": "the budget"}})"),
      kOrigin);
  for (const Session& s : {tuned, symtune::parseSession(symtune::sessionJson(tuned), kOrigin)}) {
    CHECK(s.control.mode == "tuned");
    CHECK(s.control.microbatches == 2);
    CHECK(s.control.threads == 1);
    REQUIRE(s.control.rematBudget.has_value());
    CHECK(*s.control.rematBudget == doctest::Approx(0.5));
    CHECK_FALSE(s.control.bindingExplore.has_value());
    REQUIRE(s.control.tuned.has_value());
    CHECK(s.control.tuned->evaluations == 12);
    CHECK(s.control.tuned->configurations == 48);
    CHECK(s.control.tuned->steps == 60);
    CHECK(s.control.tuned->seconds == doctest::Approx(81.5));
    CHECK(s.control.tuned->samplesPerSecond == doctest::Approx(912.5));
    CHECK(s.control.tuned->start == "microbatches 1, threads 2, remat_budget 0.6");
    CHECK(s.control.tuned->startSamplesPerSecond == doctest::Approx(700));
    CHECK(s.control.tuned->runnerUp == "microbatches 4");
    CHECK(s.control.tuned->runnerUpSamplesPerSecond == doctest::Approx(900));
    CHECK(s.control.tuned->stopped == "the budget");
  }
  const Session unexplored = symtune::parseSession(
      sessionText(R"("model": {"zoo": "dynamic_tagger"})",
                  R"(, "control": {"mode": "tuned", "binding_explore": false})"),
      kOrigin);
  for (const Session& s :
       {unexplored, symtune::parseSession(symtune::sessionJson(unexplored), kOrigin)})
    CHECK(s.control.bindingExplore == std::optional<bool>(false));
}

TEST_CASE("remat: off unless the session has the block, which needs a budget for the planner") {
  const Session plain = symtune::parseSession(sessionText(), kOrigin);
  CHECK_FALSE(plain.remat.enabled);
  CHECK(symtune::parseSession(symtune::sessionJson(plain), kOrigin).remat.enabled == false);

  const Session share = symtune::parseSession(sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                                                          R"(, "remat": {"budget_fraction": 0.5})"),
                                              kOrigin);
  CHECK(share.remat.enabled);
  CHECK(share.remat.strategy == "plan");
  REQUIRE(share.remat.budgetFraction.has_value());
  CHECK(*share.remat.budgetFraction == doctest::Approx(0.5));
  CHECK_FALSE(share.remat.budgetMb.has_value());
  CHECK_FALSE(share.remat.bind);
  CHECK_FALSE(share.remat.plainPeakMb.has_value());
  const Session again = symtune::parseSession(symtune::sessionJson(share), kOrigin);
  CHECK(again.remat.enabled);
  CHECK(*again.remat.budgetFraction == doctest::Approx(0.5));

  // remat.plain_peak_mb: what the fraction is of where larger than the calibration's.
  const Session known = symtune::parseSession(
      sessionText(R"("model": {"zoo": "transformer_xl"})",
                  R"(, "remat": {"budget_fraction": 0.6, "plain_peak_mb": 185.4})"),
      kOrigin);
  REQUIRE(known.remat.plainPeakMb.has_value());
  CHECK(*known.remat.plainPeakMb == doctest::Approx(185.4));
  const Session knownAgain = symtune::parseSession(symtune::sessionJson(known), kOrigin);
  REQUIRE(knownAgain.remat.plainPeakMb.has_value());
  CHECK(*knownAgain.remat.plainPeakMb == doctest::Approx(185.4));

  // remat.bind: bound under the budget, binding on.
  const Session bound = symtune::parseSession(
      sessionText(
          R"("model": {"zoo": "tree_rnn"})",
          R"(, "remat": {"budget_mb": 1.9, "bind": true}, "control": {"binding_explore": true})"),
      kOrigin);
  CHECK(bound.remat.bind);
  CHECK(symtune::parseSession(symtune::sessionJson(bound), kOrigin).remat.bind);

  const Session bytes = symtune::parseSession(
      sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                  R"(, "remat": {"budget_mb": 256, "strategy": "checkpoint"})"),
      kOrigin);
  CHECK(*bytes.remat.budgetMb == doctest::Approx(256));
  CHECK(bytes.remat.strategy == "checkpoint");
  const Session blocks =
      symtune::parseSession(sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                                        R"(, "remat": {"strategy": "checkpoint"})"),
                            kOrigin);
  CHECK_FALSE(blocks.remat.budgetMb.has_value());
  const Session cheap =
      symtune::parseSession(sessionText(R"("model": {"zoo": "dynamic_resnet"})",
                                        R"(, "remat": {"strategy": "selective"})"),
                            kOrigin);
  CHECK(cheap.remat.strategy == "selective");
  CHECK_FALSE(cheap.remat.budgetMb.has_value());
}

// A session under a linked folder: `..` leaves the folder the link points at, as the shell's
// `ls link/../m.pt` does. Joined as text, link/.. cancelled and named a model beside the link.
TEST_CASE("paths resolve against the session's folder with its links followed") {
  symtune::test::TempDir dir;
  std::filesystem::create_directories(dir.path() / "real" / "sub");
  std::filesystem::create_directory_symlink(dir.path() / "real" / "sub", dir.path() / "link");
  const Session s = symtune::parseSession(sessionText(R"("model": {"file": "../m.pt", "classes": 3,
                     "inputs": [{"shape": [4, 2]}]})",
                                                      R"(, "run": {"checkpoint": "../run.ckpt"})"),
                                          dir.path() / "link" / "s.json");
  const auto real = std::filesystem::canonical(dir.path() / "real");
  CHECK(s.model.file == real / "m.pt");
  CHECK(s.run.checkpoint == real / "run.ckpt");
}

TEST_CASE("a file model session resolves its paths against the session file") {
  const Session s = symtune::parseSession(
      sessionText(R"("name": "mine", "model": {"file": "../models/m.pt", "classes": 4,
                     "inputs": [{"shape": [8, 3, 5]}, {"shape": [8], "dtype": "int64"}]})",
                  R"(, "data": {"seed": 3, "batch_size": 32},
                     "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
                     "run": {"steps": 7, "device": "auto", "threads": 2, "gpu_trace": false,
                             "nvtx": true, "cpu_memory": "retain"})"),
      kOrigin);
  CHECK(s.name == "mine");
  CHECK(s.model.file == std::filesystem::path("/models/m.pt"));
  REQUIRE(s.model.inputs.size() == 2);
  CHECK(s.model.inputs[0].shape == std::vector<int64_t>{8, 3, 5});
  // Parenthesized: doctest would find symtune::toString(DType) by ADL and fail on its char*.
  CHECK((s.model.inputs[1].dtype == symtune::DType::Int64));
  CHECK(s.model.classes == 4);
  CHECK(s.data.seed == 3);
  REQUIRE(s.data.batchSize.has_value());
  CHECK(*s.data.batchSize == 32);
  CHECK(s.optimizer.momentum == doctest::Approx(0.9).epsilon(1e-12));
  CHECK(s.run.steps == 7);
  CHECK(s.run.threads == 2);
  CHECK(s.run.cpuMemory == "retain");
  CHECK(!s.run.gpuTrace);
  CHECK(s.run.nvtx);
  // What sessionJson writes reads back the same.
  const Session again = symtune::parseSession(symtune::sessionJson(s), kOrigin);
  CHECK(!again.run.gpuTrace);
  CHECK(again.run.nvtx);
}

TEST_CASE("data files and the loss: names resolve against the session, written back as read") {
  const Session s = symtune::parseSession(
      sessionText(R"("model": {"file": "m.pt", "classes": 5})",
                  R"(, "data": {"format": "npy", "inputs": ["x.npy", "../common/lengths.npy"],
                                 "target": "y.npy", "lengths": "../common/lengths.npy",
                                 "batch_size": 8, "workers": 2, "shuffle": false,
                                 "drop_last": true, "validation_fraction": 0.1},
                     "loss": {"kind": "cross_entropy", "ignore_index": 0,
                              "label_smoothing": 0.05})"),
      kOrigin);
  CHECK(s.model.inputs.empty());
  const symtune::DataFilesSpec& files = s.data.files;
  CHECK(files.enabled());
  CHECK(files.format == "npy");
  CHECK(files.inputs ==
        std::vector<std::vector<std::string>>{{"/sessions/x.npy"}, {"/common/lengths.npy"}});
  CHECK(files.target == "/sessions/y.npy");
  CHECK(files.lengths == "/common/lengths.npy");
  CHECK(files.workers == 2);
  CHECK(!files.shuffle);
  CHECK(files.dropLast);
  CHECK(files.validationFraction == doctest::Approx(0.1));
  CHECK(s.loss.ignoreIndex == 0);
  CHECK(s.loss.labelSmoothing == doctest::Approx(0.05));
  CHECK(!s.loss.isPlainCrossEntropy());

  const Session again = symtune::parseSession(symtune::sessionJson(s), kOrigin);
  CHECK(again.data.files.inputs == files.inputs);
  CHECK(again.data.files.lengths == files.lengths);
  CHECK(again.data.files.validationFraction == doctest::Approx(0.1));
  CHECK(again.loss.ignoreIndex == 0);
  CHECK(again.model.inputs.empty());

  const Session csv = symtune::parseSession(
      sessionText(R"("model": {"file": "m.pt", "classes": 1})",
                  R"(, "data": {"format": "csv", "file": "d.csv", "inputs": [["a", "b"], "c"],
                                 "target": "y", "batch_size": 4},
                     "loss": {"kind": "smooth_l1", "beta": 0.5})"),
      kOrigin);
  CHECK(csv.data.files.file == std::filesystem::path("/sessions/d.csv"));
  CHECK(csv.data.files.inputs == std::vector<std::vector<std::string>>{{"a", "b"}, {"c"}});
  CHECK(csv.loss.beta == doctest::Approx(0.5));
  const Session csvAgain = symtune::parseSession(symtune::sessionJson(csv), kOrigin);
  CHECK(csvAgain.data.files.inputs == csv.data.files.inputs);
  CHECK(csvAgain.loss.kind == "smooth_l1");
}

TEST_CASE("outputs, a loss method, images and checkpoints: written back as read") {
  const Session s = symtune::parseSession(
      sessionText(R"("model": {"file": "m.pt", "classes": 10, "output": "logits",
                               "auxiliary_outputs": [{"output": 2, "weight": 0.3},
                                                     {"output": "aux2"}]})",
                  R"(, "data": {"format": "images", "file": "pictures/train", "batch_size": 8,
                                 "image": {"resize": 36, "crop": 32, "channels": 3,
                                           "mean": [0.5, 0.5, 0.5], "std": [0.2, 0.2, 0.2]}},
                     "loss": {"method": "criterion"},
                     "run": {"checkpoint": "ckpt/run.ckpt", "checkpoint_every": 50})"),
      kOrigin);
  CHECK(s.model.output.key == "logits");
  REQUIRE(s.model.auxiliaryOutputs.size() == 2);
  CHECK(s.model.auxiliaryOutputs[0].output.index == std::optional<int64_t>(2));
  CHECK(s.model.auxiliaryOutputs[0].weight == doctest::Approx(0.3));
  CHECK(s.model.auxiliaryOutputs[1].output.key == "aux2");
  CHECK(s.model.auxiliaryOutputs[1].weight == 1.0);
  CHECK(s.data.files.file == std::filesystem::path("/sessions/pictures/train"));
  CHECK(s.data.files.inputs == std::vector<std::vector<std::string>>{{"images"}});
  CHECK(s.data.files.target == "labels");
  CHECK(s.data.files.image.resize == std::vector<int64_t>{36});
  CHECK(s.data.files.image.crop == std::vector<int64_t>{32, 32});
  CHECK(s.loss.method == "criterion");
  CHECK(!s.loss.isPlainCrossEntropy());
  CHECK(s.run.checkpoint == std::filesystem::path("/sessions/ckpt/run.ckpt"));
  CHECK(s.run.checkpointEvery == 50);

  const Session again = symtune::parseSession(symtune::sessionJson(s), kOrigin);
  CHECK(again.model.output.key == "logits");
  REQUIRE(again.model.auxiliaryOutputs.size() == 2);
  CHECK(again.model.auxiliaryOutputs[0].output.index == std::optional<int64_t>(2));
  CHECK(again.data.files.image.crop == s.data.files.image.crop);
  CHECK(again.data.files.image.std == s.data.files.image.std);
  CHECK(again.loss.method == "criterion");
  CHECK(again.run.checkpoint == s.run.checkpoint);
  CHECK(again.run.checkpointEvery == 50);
}

TEST_CASE("each kind of mistake is refused with a message naming the file and the field") {
  for (const RejectedSession& row : rejectedSessions()) {
    INFO(row.name);
    try {
      symtune::parseSession(row.text, kOrigin);
      FAIL("the session was accepted");
    } catch (const SessionError& e) {
      CHECK(std::string(e.what()) == kOrigin.string() + ": " + row.message);
    }
  }
}

TEST_CASE("the error carries the file, the field and the problem apart") {
  try {
    symtune::parseSession(
        sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "run": {"steps": 0})"), kOrigin);
    FAIL("accepted");
  } catch (const SessionError& e) {
    CHECK(e.file() == kOrigin.string());
    CHECK(e.field() == "run.steps");
    CHECK(e.problem() == "expected a positive integer, found 0");
  }
}

TEST_CASE("a session loads from disk, and a missing file is reported with its path") {
  symtune::test::TempDir dir;
  const auto path = dir.path() / "a.json";
  symtune::test::writeFile(path, sessionText());
  CHECK(symtune::loadSession(path).path == path);
  const auto missing = dir.path() / "missing.json";
  try {
    symtune::loadSession(missing);
    FAIL("a missing file loaded");
  } catch (const SessionError& e) {
    CHECK(std::string(e.what()) == missing.string() + ": cannot open the file");
  }
  CHECK(std::string(symtune::test::errorOf([&] { symtune::loadSession(dir.path()); })) ==
        dir.path().string() + ": is a folder, not a session file");

  // A problem inside names the file as the caller did (a relative path stays relative), while
  // the session's own paths resolve against where it lies.
  symtune::test::writeFile(
      dir.path() / "bad.json",
      sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "run": {"steps": "x"})"));
  const auto before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  const std::string relative = symtune::test::errorOf([] { symtune::loadSession("bad.json"); });
  std::filesystem::current_path(before);
  CHECK(relative == "bad.json: run.steps: expected an integer, found a string");
}

TEST_CASE("a folder's sessions are its .json files but the binding tables beside them") {
  CHECK(symtune::looksLikeSessionFile("/s/demo.json"));
  CHECK(symtune::looksLikeSessionFile("demo.JSON") == false);
  CHECK_FALSE(symtune::looksLikeSessionFile("/s/demo.bindings.json"));
  CHECK_FALSE(symtune::looksLikeSessionFile("/s/demo.report"));
  CHECK(symtune::looksLikeSessionFile("/s/.bindings.json"));  // a session's odd name, no table
}

TEST_CASE("every bundled session is valid") {
  const auto dir = std::filesystem::path(SYMTUNE_SOURCE_DIR) / "resources" / "sessions";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!symtune::looksLikeSessionFile(entry.path()))
      continue;  // a binding table a run left beside its session, or not JSON
    INFO(entry.path().string());
    const Session s = symtune::loadSession(entry.path());
    CHECK(!s.name.empty());
    ++count;
  }
  CHECK(count >= 1);
}
