#include "symtune/data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>

#include <ATen/Parallel.h>
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>
#include <torch/nn/functional/vision.h>

namespace symtune {

namespace {

// The most pixels an image may declare (16384 × 16384): a header is a few bytes, and one that
// claims more would take gigabytes to decode into, per image, several at once.
constexpr uint64_t kMostPixels = uint64_t{1} << 28;

void checkPixels(uint64_t width, uint64_t height, const std::filesystem::path& file) {
  if (width * height > kMostPixels)
    throw DataError(file.string() + ": declares " + std::to_string(width) + " × " +
                    std::to_string(height) + " pixels, more than " + std::to_string(kMostPixels) +
                    " (16384 × 16384)");
}

std::string readBytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw DataError(file.string() + ": cannot be opened");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

torch::Tensor decodePng(const std::string& bytes, const std::filesystem::path& file, int channels) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()) == 0)
    throw DataError(file.string() + ": not a readable PNG image: " + image.message);
  // An image with alpha is read with it, then the alpha dropped, as PIL's convert does. Read
  // without it, libpng would blend the pixels onto the buffer's contents (no background given).
  const bool alpha = (image.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  // A colour image made grey is read in colour and made grey here, with the weights PIL's
  // convert("L") and libjpeg use on the stored values: libpng weighs in linear light (pure red
  // gave 0.494 for PIL's 0.298), so PNGs and JPEGs of one folder disagreed.
  const bool toGrey = channels == 1 && (image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  const int read = toGrey ? 3 : channels;
  image.format = read == 3 ? (alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB)
                           : (alpha ? PNG_FORMAT_GA : PNG_FORMAT_GRAY);
  if (image.width * uint64_t{image.height} > kMostPixels) {
    png_image_free(&image);
    checkPixels(image.width, image.height, file);
  }
  torch::Tensor pixels = torch::empty({static_cast<int64_t>(image.height),
                                       static_cast<int64_t>(image.width), read + (alpha ? 1 : 0)},
                                      torch::kUInt8);
  if (png_image_finish_read(&image, nullptr, pixels.data_ptr(), 0, nullptr) == 0) {
    const std::string why = image.message;
    png_image_free(&image);
    throw DataError(file.string() + ": not a readable PNG image: " + why);
  }
  pixels = pixels.narrow(2, 0, read).permute({2, 0, 1});
  if (toGrey) {
    // PIL's L = R·299/1000 + G·587/1000 + B·114/1000, in its fixed point.
    const torch::Tensor rgb = pixels.to(torch::kInt32);
    pixels = (rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 32768)
                 .bitwise_right_shift(16)
                 .to(torch::kUInt8)
                 .unsqueeze(0);
  }
  return pixels.contiguous();
}

// libjpeg reports errors through a callback that must not return: it jumps back to decodeJpeg.
struct JpegError {
  jpeg_error_mgr manager;
  std::jmp_buf back;
  char message[JMSG_LENGTH_MAX];
};

void jpegFailed(j_common_ptr info) {
  auto* error = reinterpret_cast<JpegError*>(info->err);
  (*info->err->format_message)(info, error->message);
  std::longjmp(error->back, 1);
}

void jpegWarning(j_common_ptr info, int level) {
  // Other warnings (extraneous bytes before a marker, say: cameras write them) are libjpeg's to
  // recover from; a stream that ends early is not, since libjpeg fills the rows it lacks with grey.
  if (level == -1 && info->err->msg_code == JWRN_JPEG_EOF)
    jpegFailed(info);
}

torch::Tensor decodeJpeg(const std::string& bytes, const std::filesystem::path& file,
                         int channels) {
  jpeg_decompress_struct info{};
  JpegError error{};
  info.err = jpeg_std_error(&error.manager);
  error.manager.error_exit = jpegFailed;
  error.manager.emit_message = jpegWarning;
  // Everything that outlives a jump back is declared before it, and owns nothing C++ destroys.
  torch::Tensor pixels;
  if (setjmp(error.back) != 0) {
    jpeg_destroy_decompress(&info);
    throw DataError(file.string() + ": not a readable JPEG image: " + error.message);
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  info.out_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  if (uint64_t{info.image_width} * info.image_height > kMostPixels) {
    const auto width = info.image_width, height = info.image_height;
    jpeg_destroy_decompress(&info);
    checkPixels(width, height, file);
  }
  jpeg_start_decompress(&info);
  pixels = torch::empty(
      {static_cast<int64_t>(info.output_height), static_cast<int64_t>(info.output_width), channels},
      torch::kUInt8);
  const auto rowBytes = static_cast<size_t>(info.output_width) * static_cast<size_t>(channels);
  auto* base = pixels.data_ptr<uint8_t>();
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = base + static_cast<size_t>(info.output_scanline) * rowBytes;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return pixels.permute({2, 0, 1}).contiguous();
}

bool isImageFile(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

bool hidden(const std::filesystem::path& p) {
  return p.filename().string().rfind('.', 0) == 0;
}

// The class folders: the folder's own sub-folders but hidden ones, by name.
std::vector<std::filesystem::path> classFolders(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    if (!hidden(entry.path()) && entry.is_directory())
      out.push_back(entry.path());
  }
  if (ec)
    throw DataError(folder.string() + ": cannot be listed: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

// A class folder's images, in its sub-folders too (torchvision's ImageFolder walks them; read
// flat, a nested folder's images were passed over unsaid), in the order it sorts them: by folder,
// then by name. Hidden files and folders are passed over, and a folder reached through a symbolic
// link is not entered (one that links to a folder above it would never end).
std::vector<std::filesystem::path> classImages(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(folder, ec);
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::filesystem::directory_entry& entry = *it;
    std::error_code kind;
    if (hidden(entry.path())) {
      if (entry.is_directory(kind))
        it.disable_recursion_pending();
      continue;
    }
    if (entry.is_regular_file(kind) && isImageFile(entry.path()))
      out.push_back(entry.path());
    else if (kind && kind != std::errc::no_such_file_or_directory)  // a link that loops, say
      throw DataError(entry.path().string() + ": cannot be read: " + kind.message());
  }
  if (ec)
    throw DataError(folder.string() + ": cannot be listed: " + ec.message());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::pair(a.parent_path().string(), a.filename().string()) <
           std::pair(b.parent_path().string(), b.filename().string());
  });
  return out;
}

std::string sizeText(int64_t h, int64_t w) {
  return std::to_string(w) + "x" + std::to_string(h);
}

// The decoded image passed kMostPixels, the resized one must too: a 4000 × 1 PNG of 372 bytes
// resized to 128 took 2.7 GB, and one of 16384 × 1 to 16384 asked for 52 TB.
void checkResized(int64_t h, int64_t w, const std::vector<int64_t>& size) {
  if (static_cast<uint64_t>(size[0]) * static_cast<uint64_t>(size[1]) > kMostPixels)
    throw std::invalid_argument("is " + sizeText(h, w) + ": resized to " +
                                sizeText(size[0], size[1]) + " it holds more than " +
                                std::to_string(kMostPixels) + " pixels (16384 × 16384)");
}

// One decoded image [C, H, W] uint8 as the spec declares it: [C, H', W'] float32.
torch::Tensor transformed(torch::Tensor pixels, const ImageSpec& spec) {
  torch::Tensor x = pixels.to(torch::kFloat).unsqueeze(0);
  if (!spec.resize.empty()) {
    const int64_t h = x.size(2), w = x.size(3);
    std::vector<int64_t> size = spec.resize;
    if (size.size() == 1) {  // the shorter side to the size, the aspect kept
      // In integers, as torchvision's int(n * long / short) gives it: in doubles, a 55 × 55
      // image resized to 224 was 224 × 223 (55 · (224 / 55) = 223.99999...).
      const int64_t shorter = std::min(h, w), longer = std::max(h, w);
      const int64_t other = size[0] * longer / shorter;
      size = h <= w ? std::vector<int64_t>{size[0], other} : std::vector<int64_t>{other, size[0]};
    }
    checkResized(h, w, size);
    if (size[0] != h || size[1] != w) {
      // What torch::nn::functional::interpolate (bilinear, antialias, corners not aligned) calls,
      // without its options struct (GCC 12 read it as maybe-uninitialised here: -Werror).
      x = at::_upsample_bilinear2d_aa(x, size, /*align_corners=*/false, std::nullopt, std::nullopt)
              .round()
              .clamp(0, 255);
    }
  }
  if (!spec.crop.empty()) {
    const int64_t h = spec.crop[0], w = spec.crop[1];
    if (h > x.size(2) || w > x.size(3))
      throw std::invalid_argument("is " + sizeText(x.size(2), x.size(3)) +
                                  ", smaller than the crop " + sizeText(h, w));
    // The margin halved, rounded half to even: torchvision's int(round((H - h) / 2.0)).
    const auto start = [](int64_t margin) {
      const int64_t half = margin / 2;
      return margin % 2 == 1 && half % 2 == 1 ? half + 1 : half;
    };
    x = x.narrow(2, start(x.size(2) - h), h).narrow(3, start(x.size(3) - w), w);
  }
  x = x.squeeze(0) / 255.0;
  const auto channels = static_cast<int64_t>(spec.channels);
  if (!spec.mean.empty())
    x = x - torch::tensor(spec.mean, torch::kDouble).to(torch::kFloat).view({channels, 1, 1});
  if (!spec.std.empty())
    x = x / torch::tensor(spec.std, torch::kDouble).to(torch::kFloat).view({channels, 1, 1});
  return x.contiguous();
}

}  // namespace

torch::Tensor decodeImage(const std::filesystem::path& file, int channels) {
  const std::string bytes = readBytes(file);
  const auto byte = [&](size_t i) { return i < bytes.size() ? static_cast<uint8_t>(bytes[i]) : 0; };
  if (byte(0) == 0x89 && byte(1) == 'P' && byte(2) == 'N' && byte(3) == 'G')
    return decodePng(bytes, file, channels);
  if (byte(0) == 0xFF && byte(1) == 0xD8 && byte(2) == 0xFF)
    return decodeJpeg(bytes, file, channels);
  throw DataError(file.string() + ": neither a PNG nor a JPEG image (by its first bytes)");
}

ImageFolder readImageFolder(const std::filesystem::path& folder, const ImageSpec& spec) {
  if (!std::filesystem::is_directory(folder))
    throw DataError(folder.string() +
                    ": no such folder (data.format images names a folder with "
                    "a sub-folder per class)");
  ImageFolder out;
  std::vector<std::filesystem::path> files;
  std::vector<int64_t> labels;
  for (const auto& classFolder : classFolders(folder)) {
    const std::vector<std::filesystem::path> images = classImages(classFolder);
    // torchvision's ImageFolder refuses it too: passed over, it would shift the labels after it.
    if (images.empty())
      throw DataError(classFolder.string() +
                      ": a class folder without PNG or JPEG images (its label would be "
                      "missing); remove it or add images");
    for (const auto& f : images) {
      files.push_back(f);
      labels.push_back(static_cast<int64_t>(out.classes.size()));
    }
    out.classes.push_back(classFolder.filename().string());
  }
  if (out.classes.empty())
    throw DataError(folder.string() +
                    ": no sub-folder holds PNG or JPEG images (one sub-folder per class)");

  // Decoded in parallel; each image's error kept to report the first by file order.
  const auto n = static_cast<int64_t>(files.size());
  std::vector<torch::Tensor> images(files.size());
  std::vector<std::string> errors(files.size());
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto k = static_cast<size_t>(i);
      try {
        images[k] = transformed(decodeImage(files[k], spec.channels), spec);
      } catch (const DataError& e) {
        errors[k] = e.what();
      } catch (const c10::Error& e) {  // one line, not LibTorch's frames
        errors[k] = files[k].string() + ": " + e.what_without_backtrace();
      } catch (const std::exception& e) {
        errors[k] = files[k].string() + ": " + e.what();
      }
    }
  });
  for (const auto& e : errors) {
    if (!e.empty())
      throw DataError(e);
  }
  for (size_t i = 1; i < images.size(); ++i) {
    if (images[i].sizes() != images[0].sizes())
      throw DataError(files[i].string() + ": " + sizeText(images[i].size(1), images[i].size(2)) +
                      ", but " + files[0].filename().string() + " is " +
                      sizeText(images[0].size(1), images[0].size(2)) +
                      ": give data.image.resize or crop so that every image comes out the same");
  }
  out.arrays.emplace_back("images", torch::stack(images));
  out.arrays.emplace_back("labels", torch::tensor(labels, torch::kLong));
  return out;
}

}  // namespace symtune
