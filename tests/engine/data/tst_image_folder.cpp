// Image folders (data.format "images"): tests/data/images/ holds a sub-folder per class of stripes
// and checks (make_test_data.py; PNG in RGB, grey and with alpha, and JPEG, of sizes from 20 to
// 28 pixels). They decode to what was drawn, come out resized, cropped and normalised as
// declared, batch through FileDataSource, and a bad image or folder is one line naming it.

#include "doctest_torch.h"

#include <string>

#include "error_of.h"
#include "symtune/data/file_source.h"
#include "symtune/data/image_folder.h"
#include "test_files.h"

namespace {

using symtune::test::errorOf;

const std::filesystem::path kImages =
    std::filesystem::path(SYMTUNE_SOURCE_DIR) / "tests" / "data" / "images";

symtune::ImageSpec spec(std::vector<int64_t> resize, std::vector<int64_t> crop = {},
                        int channels = 3) {
  symtune::ImageSpec s;
  s.resize = std::move(resize);
  s.crop = std::move(crop);
  s.channels = channels;
  return s;
}

// How much neighbours differ across rows (vertically) and along them (horizontally).
std::pair<double, double> changes(const torch::Tensor& image) {
  const double down =
      (image.narrow(1, 1, image.size(1) - 1) - image.narrow(1, 0, image.size(1) - 1))
          .abs()
          .mean()
          .item<double>();
  const double across =
      (image.narrow(2, 1, image.size(2) - 1) - image.narrow(2, 0, image.size(2) - 1))
          .abs()
          .mean()
          .item<double>();
  return {down, across};
}

}  // namespace

TEST_CASE("an image folder reads as images and labels, a class per sub-folder") {
  const symtune::ImageFolder folder = symtune::readImageFolder(kImages, spec({16, 16}));
  CHECK(folder.classes == std::vector<std::string>{"checks", "columns", "rows"});
  REQUIRE(folder.arrays.size() == 2);
  CHECK(folder.arrays[0].first == "images");
  const torch::Tensor images = folder.arrays[0].second, labels = folder.arrays[1].second;
  CHECK(images.sizes() == torch::IntArrayRef({72, 3, 16, 16}));
  CHECK((images.scalar_type() == torch::kFloat));
  CHECK(images.min().item<float>() >= 0.0f);
  CHECK(images.max().item<float>() <= 1.0f);
  CHECK(labels.bincount().equal(torch::tensor({24, 24, 24}, torch::kLong)));
  // Every file decodes to what was drawn: rows change down the image, columns across it.
  for (int64_t i = 0; i < 72; ++i) {
    CAPTURE(i);
    const auto [down, across] = changes(images[i]);
    const int64_t label = labels[i].item<int64_t>();
    if (label == 1)
      CHECK(across > 2 * down);
    if (label == 2)
      CHECK(down > 2 * across);
  }
}

TEST_CASE("PNG and JPEG decode to their pixels, in grey or RGB") {
  // 01.png was saved grey, 00.jpg and 03.png RGB, 02.PNG with alpha.
  const torch::Tensor grey = symtune::decodeImage(kImages / "rows" / "01.png", 1);
  CHECK(grey.dim() == 3);
  CHECK(grey.size(0) == 1);
  CHECK((grey.scalar_type() == torch::kUInt8));
  const torch::Tensor rgb = symtune::decodeImage(kImages / "rows" / "01.png", 3);
  CHECK(rgb.size(0) == 3);
  CHECK(rgb[0].equal(rgb[1]));  // grey to RGB: the same three planes
  CHECK(rgb[0].equal(grey[0]));
  for (const char* name : {"00.jpg", "02.PNG", "03.png"}) {
    CAPTURE(name);
    const torch::Tensor image = symtune::decodeImage(kImages / "rows" / name, 3);
    CHECK(image.size(0) == 3);
    CHECK(image.size(1) >= 20);
    CHECK(image.size(1) <= 28);
    const auto [down, across] = changes(image.to(torch::kFloat));
    CHECK(down > 2 * across);
  }
}

TEST_CASE("a colour PNG read as grey is PIL's convert(\"L\") of it") {
  // Red, green, blue, grey 128: libpng's own conversion weighed in linear light and gave
  // 126, 219, 76, 128, where PIL (and libjpeg, for the folder's JPEGs) give 76, 150, 29, 128.
  const torch::Tensor grey = symtune::decodeImage(kImages.parent_path() / "primaries.png", 1);
  CHECK(grey.flatten().equal(torch::tensor({76, 150, 29, 128}, torch::kUInt8)));
}

TEST_CASE("resize, crop and normalise as declared") {
  // The shorter side to 16 keeps the aspect: sizes differ until a crop evens them.
  const std::string uneven = errorOf([] { symtune::readImageFolder(kImages, spec({16})); });
  CHECK(uneven.find(": give data.image.resize or crop so that every image comes out the same") !=
        std::string::npos);
  CHECK(uneven.rfind(kImages.string() + "/", 0) == 0);
  const torch::Tensor cropped =
      symtune::readImageFolder(kImages, spec({16}, {12, 14})).arrays[0].second;
  CHECK(cropped.sizes() == torch::IntArrayRef({72, 3, 12, 14}));
  const torch::Tensor grey =
      symtune::readImageFolder(kImages, spec({10, 12}, {}, 1)).arrays[0].second;
  CHECK(grey.sizes() == torch::IntArrayRef({72, 1, 10, 12}));
  // The centre crop of the resized image.
  const torch::Tensor whole = symtune::readImageFolder(kImages, spec({16, 16})).arrays[0].second;
  const torch::Tensor centre =
      symtune::readImageFolder(kImages, spec({16, 16}, {8, 8})).arrays[0].second;
  CHECK(centre.equal(whole.narrow(2, 4, 8).narrow(3, 4, 8)));
  symtune::ImageSpec normalised = spec({16, 16});
  normalised.mean = {0.5, 0.4, 0.3};
  normalised.std = {0.25, 0.2, 0.5};
  const torch::Tensor n = symtune::readImageFolder(kImages, normalised).arrays[0].second;
  const torch::Tensor mean = torch::tensor({0.5f, 0.4f, 0.3f}).view({1, 3, 1, 1});
  const torch::Tensor std = torch::tensor({0.25f, 0.2f, 0.5f}).view({1, 3, 1, 1});
  CHECK(torch::allclose(n, (whole - mean) / std, 1e-5, 1e-6));
}

TEST_CASE("images batch through FileDataSource with their labels") {
  symtune::DataSpec data;
  data.batchSize = 8;
  data.seed = 3;
  data.files.format = "images";
  data.files.file = kImages;
  data.files.inputs = {{"images"}};
  data.files.target = "labels";
  data.files.image = spec({16, 16});
  data.files.validationFraction = 0.25;
  symtune::FileDataSource source(data, symtune::LossSpec{}, 3);
  CHECK(source.trainingSamples() == 54);
  CHECK(source.validationSamples() == 18);
  const symtune::Batch b = source.batch(0);
  CHECK(b.inputs[0].toTensor().sizes() == torch::IntArrayRef({8, 3, 16, 16}));
  CHECK(b.target.sizes() == torch::IntArrayRef({8}));
  // Two classes declared for three folders: a label outside the classes.
  CHECK(errorOf([&] { symtune::FileDataSource(data, symtune::LossSpec{}, 2); }).find("outside") !=
        std::string::npos);
}

TEST_CASE("a class folder's sub-folders hold its images too, as ImageFolder walks them") {
  symtune::test::TempDir dir;
  const auto folder = dir.path() / "classes";
  const std::string png = symtune::test::readFile(kImages / "rows" / "03.png");
  // Read flat, nest/a/sub/deep.png was passed over unsaid; torchvision reads three images.
  for (const char* sub : {"a/sub", "a/.hidden", "b"})
    std::filesystem::create_directories(folder / sub);
  symtune::test::writeFile(folder / "a" / "top.png", png);
  symtune::test::writeFile(folder / "a" / "sub" / "deep.png", png);
  symtune::test::writeFile(folder / "a" / ".hidden" / "skipped.png", png);
  symtune::test::writeFile(folder / "b" / "x.png", png);
  std::filesystem::create_directory_symlink(folder, folder / "b" / "loop");  // not entered
  const symtune::ImageFolder read = symtune::readImageFolder(folder, spec({8, 8}));
  CHECK(read.classes == std::vector<std::string>{"a", "b"});
  CHECK(read.arrays[1].second.equal(torch::tensor({0, 0, 1}, torch::kLong)));
}

TEST_CASE("an unreadable image or an empty folder is one line naming it") {
  symtune::test::TempDir dir;
  const auto folder = dir.path() / "classes";
  std::filesystem::create_directories(folder / "a");
  std::filesystem::create_directories(folder / "b");
  const std::string png = symtune::test::readFile(kImages / "rows" / "03.png");
  const std::string jpeg = symtune::test::readFile(kImages / "rows" / "00.jpg");
  symtune::test::writeFile(folder / "a" / "good.png", png);
  symtune::test::writeFile(folder / "b" / "good.jpg", jpeg);
  symtune::test::writeFile(folder / "b" / "notes.txt", "not an image, passed over");
  CHECK(symtune::readImageFolder(folder, spec({8, 8})).classes ==
        std::vector<std::string>{"a", "b"});

  const auto bad = [&](const std::string& name, const std::string& bytes) {
    symtune::test::writeFile(folder / "a" / name, bytes);
    const std::string e = errorOf([&] { symtune::readImageFolder(folder, spec({8, 8})); });
    std::filesystem::remove(folder / "a" / name);
    return e;
  };
  const std::string at = (folder / "a").string() + "/";
  CHECK(bad("cut.png", png.substr(0, 60)).rfind(at + "cut.png: not a readable PNG image: ", 0) ==
        0);
  CHECK(bad("cut.jpg", jpeg.substr(0, 20)).rfind(at + "cut.jpg: not a readable JPEG image: ", 0) ==
        0);
  // Cut short after its header: libjpeg filled the missing rows with grey, and it trained.
  CHECK(bad("half.jpg", jpeg.substr(0, jpeg.size() / 2)) ==
        at + "half.jpg: not a readable JPEG image: Premature end of JPEG file");
  // A header that claims 20000 × 20000 pixels took gigabytes to decode into.
  std::string huge = jpeg;
  const size_t frame = huge.find("\xFF\xC0");
  REQUIRE(frame != std::string::npos);
  for (const size_t at16 : {frame + 5, frame + 7}) {  // height, then width: 20000 big-endian
    huge[at16] = static_cast<char>(20000 >> 8);
    huge[at16 + 1] = static_cast<char>(20000 & 0xff);
  }
  CHECK(bad("huge.jpg", huge) ==
        at + "huge.jpg: declares 20000 × 20000 pixels, more than 268435456 (16384 × 16384)");
  // Resized, a small image may grow past the limit a header is held to: refused before the
  // interpolation (a 4000 × 1 PNG resized to 128 took 2.7 GB until 2026-12-07).
  const std::string grown = errorOf([&] { symtune::readImageFolder(folder, spec({16384})); });
  CHECK(grown.rfind(at + "good.png: is ", 0) == 0);
  CHECK(grown.find(" it holds more than 268435456 pixels (16384 × 16384)") != std::string::npos);
  CHECK(bad("text.jpg", "hello") == at + "text.jpg: neither a PNG nor a JPEG image (by its first "
                                         "bytes)");
  CHECK(errorOf([&] {
          symtune::readImageFolder(folder / "a", spec({8, 8}));
        }) == (folder / "a").string() +
                  ": no sub-folder holds PNG or JPEG images (one sub-folder per class)");
  CHECK(errorOf([&] {
          symtune::readImageFolder(folder / "none", spec({8, 8}));
        }) ==
        (folder / "none").string() +
            ": no such folder (data.format images names a folder with a sub-folder per class)");
  CHECK(errorOf([&] {
          symtune::readImageFolder(folder, spec({8, 8}, {9, 9}));
        }).find("smaller than the crop 9x9") != std::string::npos);
}
