#pragma once
// The files a user's training data comes in, read into tensors: NumPy's .npy and .npz, what
// Python's torch.save wrote (a tensor, a tuple or list, a dict of tensors) or a TorchScript
// module's tensor attributes, and a CSV file's numeric columns (docs/session-format.md, "Data
// from files"). Every problem is a DataError whose what() is one line naming the file.

#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace symtune {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Arrays by name, in the order the file holds them.
using NamedArrays = std::vector<std::pair<std::string, torch::Tensor>>;

// One .npy array: bool, (u)int8, int16/32/64, float16/32/64, either byte order, C or Fortran
// order; the tensor owns its memory and is contiguous.
torch::Tensor readNpy(const std::filesystem::path& path);
// The same from the bytes of an .npy file; `where` names it in errors ("a.npz: x.npy").
torch::Tensor parseNpy(const std::string& bytes, const std::string& where);

// Every array of an .npz archive (numpy.savez, stored, or savez_compressed, deflated), named
// without ".npy".
NamedArrays readNpz(const std::filesystem::path& path);

// What torch.save wrote: a tensor (named "0"), a tuple or list of tensors ("0", "1", …) or a
// dict of tensors (its keys); or a TorchScript archive (torch.jit.save), whose tensor attributes
// are its arrays by dotted name — the portable way to hand tensors from Python to C++.
NamedArrays readTorchFile(const std::filesystem::path& path);

// MNIST's IDX files in a folder (train-images-idx3-ubyte and train-labels-idx1-ubyte, or the
// same gzipped, as distributed): "images" [N, 1, 28, 28] float32 in [0, 1], "labels" [N] int64.
// Any number of samples: LibTorch's own reader insists on the full 60000.
NamedArrays readMnist(const std::filesystem::path& folder);
// One IDX file (unsigned bytes; gzipped when the name ends in .gz), as uint8.
torch::Tensor readIdx(const std::filesystem::path& path);

// CIFAR-10's binary batches (a label byte, then 3072 bytes of a 32×32 image's red, green and
// blue planes, per record): one .bin file, or a folder's data_batch_*.bin in name order.
// "images" [N, 3, 32, 32] float32 in [0, 1], "labels" [N] int64.
NamedArrays readCifar10(const std::filesystem::path& fileOrFolder);

// A CSV file with a header row of column names and numeric fields ([rows, columns], float64).
struct CsvTable {
  std::vector<std::string> columns;
  torch::Tensor values;
};
CsvTable readCsv(const std::filesystem::path& path);

// The names in `arrays`, comma-separated (for "it holds: …").
std::string arrayNames(const NamedArrays& arrays);

}  // namespace symtune
