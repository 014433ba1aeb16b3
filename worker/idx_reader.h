#ifndef PS_WORKER_IDX_READER_H_
#define PS_WORKER_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps::worker {

// Reading of IDX files (the format of MNIST and Fashion-MNIST), gzipped or
// not, into memory. A file is a 4-byte magic {0, 0, dtype, ndims}, then ndims
// big-endian uint32 sizes, then the elements in row-major order. Only dtype
// 0x08 (unsigned byte) is supported, which is all the MNIST family uses.
//
// Every reader here validates the whole file before returning anything: a
// malformed file yields an error naming the file and the problem, never a
// crash or a partially filled result. Error codes:
//   NotFound          the file does not exist;
//   InvalidArgument   the header is wrong (magic, dtype, number of dims, a
//                     size that is zero where it may not be or too large,
//                     images and labels that disagree, a label >= 10);
//   DataLoss          the body is wrong (shorter or longer than the header
//                     says, corrupt gzip stream);
//   other             the file could not be opened or read.
// All functions are thread-compatible and keep no state between calls.

// The largest element count accepted from a header (256 MiB of uint8): ample
// for Fashion-MNIST's 47 MB training images, small enough that a corrupt
// header cannot make us allocate without bound.
inline constexpr uint64_t kMaxIdxElements = uint64_t{1} << 28;

// The magic numbers of the two IDX kinds we read.
inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // uint8, 3 dims
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // uint8, 1 dim

// Fashion-MNIST has ten classes; labels are in [0, kFashionMnistClasses).
inline constexpr int kFashionMnistClasses = 10;

// Pixel normalization, applied by every loader below: a pixel p in [0, 255]
// becomes ((p / 255) - kPixelMean) / kPixelStd, where the constants are the
// mean and standard deviation of all pixels of the Fashion-MNIST training
// split scaled to [0, 1]. Inputs are then roughly zero-mean, unit-variance,
// which suits the MLP's initialization. The same constants are used for the
// test split so that both go through the same transform.
inline constexpr float kPixelMean = 0.2860f;
inline constexpr float kPixelStd = 0.3530f;

// The normalized value of one raw pixel (see above).
float NormalizePixel(uint8_t pixel);

// The raw content of one IDX file.
struct IdxArray {
  std::vector<uint32_t> dims;  // as in the header, outermost first
  std::vector<uint8_t> data;   // product(dims) elements, row-major
};

// Reads the IDX file at `path`, gzipped or not (detected from its content),
// whose magic must be exactly `expected_magic` (kIdxImagesMagic or
// kIdxLabelsMagic; its low byte is the number of dims).
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path,
                                     uint32_t expected_magic);

// A labelled image set, ready for training. Example i's image is
// images[i * rows * cols, (i + 1) * rows * cols) row-major, normalized as
// described above; its label is labels[i], the class index as a float (the
// form the loss kernel takes).
struct LabeledImages {
  int64_t num_examples = 0;
  int rows = 0;
  int cols = 0;
  std::vector<float> images;
  std::vector<float> labels;

  int64_t example_size() const { return int64_t{rows} * cols; }
};

// Loads an images file and a labels file (each gzipped or not): at least one
// image, rows and cols nonzero, as many labels as images, every label below
// kFashionMnistClasses.
absl::StatusOr<LabeledImages> LoadLabeledImages(const std::string& images_path,
                                                const std::string& labels_path);

// The two Fashion-MNIST splits: 60000 training and 10000 test examples.
enum class Split { kTrain, kTest };

// Loads `split` of Fashion-MNIST from `dir` (Debian's dataset-fashion-mnist
// installs it in /usr/share/datasets/fashion-mnist), with the standard file
// names: "{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz", or the same
// without ".gz" when only the uncompressed file exists.
absl::StatusOr<LabeledImages> LoadFashionMnist(const std::string& dir,
                                               Split split);

}  // namespace ps::worker

#endif  // PS_WORKER_IDX_READER_H_
