#include "common/chunk_wire.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tensor_codec.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace ps {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;

constexpr WireFormatLite::WireType kLengthDelimited =
    WireFormatLite::WIRETYPE_LENGTH_DELIMITED;

// Reads a received message's slices in order, without copying them.
class SliceInputStream final
    : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit SliceInputStream(const std::vector<grpc::Slice>* slices)
      : slices_(*slices) {}

  bool Next(const void** data, int* size) override {
    for (; index_ < slices_.size(); ++index_, offset_ = 0) {
      const grpc::Slice& slice = slices_[index_];
      if (offset_ < slice.size()) {
        *data = slice.begin() + offset_;
        *size = static_cast<int>(slice.size() - offset_);
        offset_ = slice.size();
        position_ += *size;
        return true;
      }
    }
    return false;
  }

  // Only ever within the piece the last Next returned.
  void BackUp(int count) override {
    offset_ -= count;
    position_ -= count;
  }

  bool Skip(int count) override {
    const void* data;
    int size;
    while (count > 0) {
      if (!Next(&data, &size)) return false;
      const int taken = std::min(count, size);
      BackUp(size - taken);
      count -= taken;
    }
    return true;
  }

  int64_t ByteCount() const override { return position_; }

 private:
  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t offset_ = 0;  // Within slices_[index_].
  int64_t position_ = 0;
};

// Bytes [begin, begin + size) of the slices' concatenation, sharing them.
absl::Cord CordOfRange(const std::vector<grpc::Slice>& slices, size_t begin,
                       size_t size) {
  absl::Cord cord;
  for (const grpc::Slice& slice : slices) {
    if (size == 0) break;
    if (begin >= slice.size()) {
      begin -= slice.size();
      continue;
    }
    const size_t n = std::min(slice.size() - begin, size);
    const absl::string_view piece(
        reinterpret_cast<const char*>(slice.begin()) + begin, n);
    const auto* object = reinterpret_cast<const char*>(&slice);
    if (piece.data() >= object && piece.data() < object + sizeof(slice)) {
      // An inlined slice: its few bytes live inside the slice object, which
      // does not outlive the caller's vector. They are copied.
      cord.Append(piece);
    } else {
      // The cord holds a reference to the slice until it lets go of the
      // piece.
      cord.Append(absl::MakeCordFromExternal(piece, [ref = slice] {}));
    }
    begin = 0;
    size -= n;
  }
  return cord;
}

// Where the floats' memory is not their encoding: an owned, encoded copy.
grpc::Slice EncodedCopy(absl::Span<const float> values) {
  std::string bytes;
  EncodeFloats(values, &bytes);
  return OwnedSlice(std::move(bytes));
}

// Reads a length-delimited field's length as protobuf does: a varint of at
// most 10 bytes whose value fits an int. ReadVarint32 alone would keep the
// low 32 bits of a longer one and parse what protobuf refuses.
bool ReadLength(CodedInputStream& in, uint32_t* length) {
  uint64_t value = 0;
  if (!in.ReadVarint64(&value) ||
      value > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    return false;
  }
  *length = static_cast<uint32_t>(value);
  return true;
}

// Reads a tag as protobuf's parser does: at most 5 bytes. CodedInputStream
// takes up to 10 and keeps the low 32 bits, which would parse what protobuf
// refuses, one field standing for another. Sets `*begin` to where the tag
// starts. 0 at the end of the input or limit, and with `*bad` set for a
// longer tag.
uint32_t ReadTag(CodedInputStream& in, int64_t* begin, bool* bad) {
  constexpr int kMaxTagBytes = 5;
  *begin = in.CurrentPosition();
  const uint32_t tag = in.ReadTag();
  if (in.CurrentPosition() - *begin > kMaxTagBytes) {
    *bad = true;
    return 0;
  }
  return tag;
}

// Copies ranges of the slices' concatenation, as received, in stream order:
// each range starts at or after the end of the one before, so that a
// message of many small fields costs one pass over its slices.
class RangeCopier {
 public:
  explicit RangeCopier(const std::vector<grpc::Slice>* slices)
      : slices_(*slices) {}

  void Copy(size_t begin, size_t end, CodedOutputStream* out) {
    for (; index_ < slices_.size() && begin < end; ++index_) {
      const grpc::Slice& slice = slices_[index_];
      if (begin < start_ + slice.size()) {
        const size_t n = std::min(start_ + slice.size(), end) - begin;
        out->WriteRaw(slice.begin() + (begin - start_), static_cast<int>(n));
        begin += n;
        if (begin < start_ + slice.size()) return;  // Stays in this slice.
      }
      start_ += slice.size();
    }
  }

 private:
  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t start_ = 0;  // Position of slices_[index_]'s first byte.
};

// Skips the field whose tag starts at `begin` and was just read, and copies
// it from there, as received, to `out`: the protobuf parser then judges its
// bytes by its own rules. (WireFormatLite's copying SkipField re-encodes
// them, reading lengths with ReadVarint32 and nested tags with ReadTag, and
// so would turn bytes protobuf refuses into bytes it accepts.)
bool SkipAndCopyField(CodedInputStream& in, uint32_t tag, int64_t begin,
                      RangeCopier& copier, CodedOutputStream* out) {
  if (!WireFormatLite::SkipField(&in, tag)) return false;
  copier.Copy(begin, in.CurrentPosition(), out);
  return true;
}

absl::Status Malformed(const google::protobuf::MessageLite& message,
                       absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ", message.GetTypeName(), ": ", what));
}

}  // namespace

grpc::ByteBuffer SerializeChunkMessage(
    const google::protobuf::MessageLite& message,
    const google::protobuf::MessageLite& chunk, const ChunkFields& fields,
    grpc::Slice data) {
  const size_t data_size = data.size();
  const uint32_t data_tag =
      WireFormatLite::MakeTag(fields.data, kLengthDelimited);
  const size_t chunk_length =
      chunk.ByteSizeLong() + CodedOutputStream::VarintSize32(data_tag) +
      CodedOutputStream::VarintSize64(data_size) + data_size;
  // Everything before the tensor bytes: small, so copied once more.
  std::string head = message.SerializeAsString();
  {
    StringOutputStream head_stream(&head);
    CodedOutputStream out(&head_stream);
    out.WriteTag(WireFormatLite::MakeTag(fields.chunk, kLengthDelimited));
    out.WriteVarint64(chunk_length);
    chunk.SerializeWithCachedSizes(&out);
    out.WriteTag(data_tag);
    out.WriteVarint64(data_size);
  }
  grpc::Slice slices[] = {grpc::Slice(head), std::move(data)};
  return grpc::ByteBuffer(slices, data_size == 0 ? 1 : 2);
}

absl::Status ParseChunkMessage(const grpc::ByteBuffer& buffer,
                               const ChunkFields& fields,
                               google::protobuf::MessageLite* message,
                               absl::Cord* data) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return Malformed(*message, "unreadable");
  SliceInputStream stream(&slices);
  CodedInputStream in(&stream);
  // Every field but the chunk's data, for the protobuf parser: the chunk
  // re-encoded, everything else as received.
  std::string rest;
  int64_t data_begin = -1;
  uint32_t data_size = 0;
  bool bad_tag = false;
  int64_t field_begin = 0;
  RangeCopier copier(&slices);
  {
    StringOutputStream rest_stream(&rest);
    CodedOutputStream rest_out(&rest_stream);
    while (const uint32_t tag = ReadTag(in, &field_begin, &bad_tag)) {
      if (WireFormatLite::GetTagFieldNumber(tag) != fields.chunk ||
          WireFormatLite::GetTagWireType(tag) != kLengthDelimited) {
        if (!SkipAndCopyField(in, tag, field_begin, copier, &rest_out)) {
          return Malformed(*message, "bad field");
        }
        continue;
      }
      uint32_t chunk_length;
      if (!ReadLength(in, &chunk_length)) {
        return Malformed(*message, "bad chunk length");
      }
      const CodedInputStream::Limit limit = in.PushLimit(chunk_length);
      std::string chunk_rest;
      {
        StringOutputStream chunk_stream(&chunk_rest);
        CodedOutputStream chunk_out(&chunk_stream);
        while (const uint32_t chunk_tag = ReadTag(in, &field_begin, &bad_tag)) {
          if (WireFormatLite::GetTagFieldNumber(chunk_tag) == fields.data &&
              WireFormatLite::GetTagWireType(chunk_tag) == kLengthDelimited) {
            // Protobuf semantics: the last occurrence wins.
            if (!ReadLength(in, &data_size)) {
              return Malformed(*message, "bad data length");
            }
            data_begin = in.CurrentPosition();
            if (!in.Skip(static_cast<int>(data_size))) {
              return Malformed(*message, "truncated data");
            }
          } else if (!SkipAndCopyField(in, chunk_tag, field_begin, copier,
                                       &chunk_out)) {
            return Malformed(*message, "bad chunk field");
          }
        }
      }
      // ReadTag also ends at the end of the input, short of the limit.
      if (bad_tag || !in.ConsumedEntireMessage() || in.BytesUntilLimit() != 0) {
        return Malformed(*message, "truncated or bad chunk");
      }
      in.PopLimit(limit);
      // Occurrences of a message field merge, as they would in protobuf.
      rest_out.WriteTag(tag);
      rest_out.WriteVarint32(static_cast<uint32_t>(chunk_rest.size()));
      rest_out.WriteString(chunk_rest);
    }
    if (bad_tag || !in.ConsumedEntireMessage()) {
      return Malformed(*message, "bad tag");
    }
  }
  if (!message->ParseFromString(rest)) {
    return Malformed(*message, "bad field values");
  }
  *data = data_begin < 0 ? absl::Cord()
                         : CordOfRange(slices, data_begin, data_size);
  return absl::OkStatus();
}

grpc::ByteBuffer SerializeMessage(
    const google::protobuf::MessageLite& message) {
  grpc::Slice slice = OwnedSlice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status ParseMessage(const grpc::ByteBuffer& buffer,
                          google::protobuf::MessageLite* message) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return Malformed(*message, "unreadable");
  SliceInputStream stream(&slices);
  if (!message->ParseFromZeroCopyStream(&stream)) {
    return Malformed(*message, "bad field values");
  }
  return absl::OkStatus();
}

grpc::Slice OwnedSlice(std::string bytes) {
  // Handed to gRPC, which calls the deleter when it drops the last reference.
  auto* owned = new std::string(std::move(bytes));
  return grpc::Slice(
      owned->data(), owned->size(),
      [](void* p) { delete static_cast<std::string*>(p); }, owned);
}

grpc::Slice SharedFloatsSlice(std::shared_ptr<const void> owner,
                              absl::Span<const float> values) {
  if (!kFloatEncodingIsMemoryImage) return EncodedCopy(values);
  if (values.empty()) return grpc::Slice();
  // gRPC only reads a slice it sends; the cast is for its C signature.
  return grpc::Slice(
      const_cast<float*>(values.data()), values.size() * sizeof(float),
      [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); },
      new std::shared_ptr<const void>(std::move(owner)));
}

SliceLender::~SliceLender() { AwaitReturned(); }

grpc::Slice SliceLender::LendFloats(absl::Span<const float> values) {
  {
    absl::MutexLock lock(&ledger_->mu);
    ++ledger_->outstanding;
  }
  // Settled when gRPC drops the slice (at once if none is needed); holds the
  // ledger, which may outlive this lender.
  std::shared_ptr<const void> loan(values.data(),
                                   [ledger = ledger_](const void*) {
                                     absl::MutexLock lock(&ledger->mu);
                                     --ledger->outstanding;
                                   });
  return SharedFloatsSlice(std::move(loan), values);
}

void SliceLender::AwaitReturned() {
  absl::MutexLock lock(&ledger_->mu);
  ledger_->mu.Await(absl::Condition(
      +[](Ledger* ledger) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger->mu) {
        return ledger->outstanding == 0;
      },
      ledger_.get()));
}

}  // namespace ps
