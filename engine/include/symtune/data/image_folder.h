#pragma once
// Format "images" (docs/session-format.md, "Data from files"): a folder with one sub-folder of
// PNG and JPEG files per class, as torchvision's ImageFolder reads it.
//
//   ImageFolder f = readImageFolder("flowers/train", session.data.files.image);
//   // f.arrays: "images" [N, C, H, W] float32, "labels" [N] int64; f.classes: the folder names

#include <filesystem>
#include <string>
#include <vector>

#include "symtune/core/session.h"
#include "symtune/data/array_files.h"

namespace symtune {

struct ImageFolder {
  NamedArrays arrays;                // "images", "labels"
  std::vector<std::string> classes;  // label i is the i-th sub-folder in name order
};

// Every image file (.png, .jpg, .jpeg, any case, in each class folder and its sub-folders; other
// files and hidden ones are passed over)
// decoded (libpng, libjpeg) to `image.channels` channels, scaled to `image.resize` (bilinear,
// antialiased, as torchvision's Resize), cut to `image.crop` at the centre, scaled to [0, 1] and
// normalised by `image.mean` and `image.std`; decoded in parallel, once, into memory. Throws
// DataError naming the file for an image that cannot be decoded, images of different sizes
// without a resize or crop that evens them, a folder without classes or images.
ImageFolder readImageFolder(const std::filesystem::path& folder, const ImageSpec& image);

// One image file as [channels, height, width] uint8 (PNG or JPEG, by its first bytes).
torch::Tensor decodeImage(const std::filesystem::path& file, int channels);

}  // namespace symtune
