#include "worker/idx_reader.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace ps::worker {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFilePtr = std::unique_ptr<gzFile_s, GzCloser>;

// gzread takes an unsigned int count; read in bounded chunks.
constexpr size_t kReadChunk = size_t{1} << 20;

// Opens `path` for reading. zlib reads a file without a gzip header
// unchanged ("transparent" mode), so one code path serves both kinds.
absl::StatusOr<GzFilePtr> OpenIdx(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  GzFilePtr file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  gzbuffer(file.get(), 128 * 1024);
  return file;
}

// Reads up to `n` bytes into `dst`, stopping early only at end of file.
// Returns the count read; a corrupt gzip stream is an error.
absl::StatusOr<size_t> ReadUpTo(gzFile file, const std::string& path,
                                uint8_t* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min(n - got, kReadChunk));
    const int r = gzread(file, dst + got, chunk);
    if (r < 0) {
      int errnum = Z_OK;
      absl::string_view msg = gzerror(file, &errnum);
      if (errnum == Z_ERRNO) msg = std::strerror(errno);
      // zlib prefixes its message with the path, which we print already.
      absl::ConsumePrefix(&msg, absl::StrCat(path, ": "));
      return absl::DataLossError(
          absl::StrCat(path, ": read failed (corrupt gzip data?): ", msg));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

// Explains a short read: a gzip stream cut short reports Z_BUF_ERROR.
absl::Status Truncated(gzFile file, const std::string& path,
                       absl::string_view what, size_t got, uint64_t want) {
  int errnum = Z_OK;
  gzerror(file, &errnum);
  return absl::DataLossError(absl::StrFormat(
      "%s: truncated %s: %d of %d bytes%s", path, what, got, want,
      errnum == Z_BUF_ERROR ? " (gzip stream ends early)" : ""));
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Builds "<dir>/<stem>.gz", falling back to "<dir>/<stem>" when only the
// uncompressed file exists.
std::string ResolveFile(const std::string& dir, absl::string_view stem) {
  const std::string plain = absl::StrCat(dir, "/", stem);
  const std::string gz = absl::StrCat(plain, ".gz");
  struct stat st;
  if (stat(gz.c_str(), &st) != 0 && stat(plain.c_str(), &st) == 0) {
    return plain;
  }
  return gz;
}

}  // namespace

float NormalizePixel(uint8_t pixel) {
  return (static_cast<float>(pixel) / 255.0f - kPixelMean) / kPixelStd;
}

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path,
                                     uint32_t expected_magic) {
  absl::StatusOr<GzFilePtr> opened = OpenIdx(path);
  if (!opened.ok()) return opened.status();
  gzFile file = opened->get();

  std::array<uint8_t, 4> magic_bytes;
  absl::StatusOr<size_t> got = ReadUpTo(file, path, magic_bytes.data(), 4);
  if (!got.ok()) return got.status();
  if (*got < 4) return Truncated(file, path, "header", *got, 4);
  const uint32_t magic = BigEndian32(magic_bytes.data());
  if (magic_bytes[0] != 0 || magic_bytes[1] != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not an IDX file: magic 0x%08x, expected 0x%08x",
                        path, magic, expected_magic));
  }
  if (magic_bytes[2] != ((expected_magic >> 8) & 0xff)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: unsupported element type 0x%02x, expected 0x%02x (unsigned byte)",
        path, magic_bytes[2], (expected_magic >> 8) & 0xff));
  }
  const int ndims = magic_bytes[3];
  const int expected_ndims = static_cast<int>(expected_magic & 0xff);
  if (ndims != expected_ndims) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: has %d dimensions, expected %d (magic 0x%08x, expected 0x%08x)",
        path, ndims, expected_ndims, magic, expected_magic));
  }

  std::vector<uint8_t> dim_bytes(4 * ndims);
  got = ReadUpTo(file, path, dim_bytes.data(), dim_bytes.size());
  if (!got.ok()) return got.status();
  if (*got < dim_bytes.size()) {
    return Truncated(file, path, "header sizes", *got, dim_bytes.size());
  }
  IdxArray result;
  uint64_t elements = 1;
  for (int d = 0; d < ndims; ++d) {
    const uint32_t size = BigEndian32(&dim_bytes[4 * d]);
    result.dims.push_back(size);
    // Each factor is < 2^32 and the running product <= 2^28, so no overflow.
    elements *= size;
    if (elements > kMaxIdxElements) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: header declares more than %d elements (dimension %d is %d)",
          path, kMaxIdxElements, d, size));
    }
  }

  // Grow with the data actually present rather than trusting the header
  // for one big allocation.
  result.data.reserve(std::min<uint64_t>(elements, 16 * kReadChunk));
  while (result.data.size() < elements) {
    const size_t old = result.data.size();
    const size_t want = std::min<uint64_t>(elements - old, 16 * kReadChunk);
    result.data.resize(old + want);
    got = ReadUpTo(file, path, result.data.data() + old, want);
    if (!got.ok()) return got.status();
    if (*got < want) {
      return Truncated(file, path, "data", old + *got, elements);
    }
  }
  uint8_t extra;
  got = ReadUpTo(file, path, &extra, 1);
  if (!got.ok()) return got.status();
  if (*got != 0) {
    return absl::DataLossError(absl::StrFormat(
        "%s: trailing data after the %d bytes of elements the header declares",
        path, elements));
  }
  // All the data came, but a gzip stream cut inside its trailer was never
  // checked against its CRC: zlib reports that as end of file plus
  // Z_BUF_ERROR.
  int errnum = Z_OK;
  gzerror(file, &errnum);
  if (errnum != Z_OK) {
    return absl::DataLossError(
        absl::StrCat(path, ": gzip stream ends before its trailer"));
  }
  return result;
}

absl::StatusOr<LabeledImages> LoadLabeledImages(
    const std::string& images_path, const std::string& labels_path) {
  absl::StatusOr<IdxArray> images = ReadIdxFile(images_path, kIdxImagesMagic);
  if (!images.ok()) return images.status();
  absl::StatusOr<IdxArray> labels = ReadIdxFile(labels_path, kIdxLabelsMagic);
  if (!labels.ok()) return labels.status();

  const uint32_t count = images->dims[0];
  const uint32_t rows = images->dims[1];
  const uint32_t cols = images->dims[2];
  if (count == 0 || rows == 0 || cols == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: empty image set (%d images of %d x %d)",
                        images_path, count, rows, cols));
  }
  if (labels->dims[0] != count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has %d labels but %s has %d images", labels_path,
                        labels->dims[0], images_path, count));
  }
  for (uint32_t i = 0; i < count; ++i) {
    if (labels->data[i] >= kFashionMnistClasses) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: label %d of example %d is not a class index in [0, %d)",
          labels_path, labels->data[i], i, kFashionMnistClasses));
    }
  }

  std::array<float, 256> normalized;
  for (int p = 0; p < 256; ++p) {
    normalized[p] = NormalizePixel(static_cast<uint8_t>(p));
  }
  LabeledImages out;
  out.num_examples = count;
  out.rows = static_cast<int>(rows);
  out.cols = static_cast<int>(cols);
  out.images.resize(images->data.size());
  for (size_t i = 0; i < images->data.size(); ++i) {
    out.images[i] = normalized[images->data[i]];
  }
  out.labels.assign(labels->data.begin(), labels->data.end());
  return out;
}

absl::StatusOr<LabeledImages> LoadFashionMnist(const std::string& dir,
                                               Split split) {
  const absl::string_view prefix = split == Split::kTrain ? "train" : "t10k";
  return LoadLabeledImages(
      ResolveFile(dir, absl::StrCat(prefix, "-images-idx3-ubyte")),
      ResolveFile(dir, absl::StrCat(prefix, "-labels-idx1-ubyte")));
}

}  // namespace ps::worker
