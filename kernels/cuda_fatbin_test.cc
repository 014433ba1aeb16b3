// Checks what nvcc put in kernels/cuda_kernels.cu's object: GPU code (SASS)
// for sm_80 and sm_90 and PTX for compute_90, read from the ELF section
// .nv_fatbin. Needs no GPU (or cuobjdump, which this toolkit lacks).

#include <elf.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace {

// A data dependency of the test: runfiles path, from the test's directory.
constexpr char kObjectPath[] = "kernels/cuda_kernels.pic.o";

constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint16_t kKindPtx = 1;
constexpr uint16_t kKindElf = 2;

template <typename T>
bool ReadAt(const std::string& bytes, uint64_t offset, T* out) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(out, bytes.data() + offset, sizeof(T));
  return true;
}

// The contents of the ELF64 section `name`, or "" when absent or malformed.
std::string Section(const std::string& elf, absl::string_view name) {
  Elf64_Ehdr header;
  if (!ReadAt(elf, 0, &header) ||
      std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != ELFCLASS64) {
    return "";
  }
  Elf64_Shdr names;
  if (!ReadAt(elf,
              header.e_shoff + uint64_t{header.e_shstrndx} * sizeof(Elf64_Shdr),
              &names)) {
    return "";
  }
  for (int i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr section;
    if (!ReadAt(elf,
                header.e_shoff + static_cast<uint64_t>(i) * sizeof(Elf64_Shdr),
                &section) ||
        names.sh_offset + section.sh_name >= elf.size()) {
      return "";
    }
    if (elf.c_str() + names.sh_offset + section.sh_name != name) continue;
    if (section.sh_offset > elf.size() ||
        elf.size() - section.sh_offset < section.sh_size) {
      return "";
    }
    return elf.substr(section.sh_offset, section.sh_size);
  }
  return "";
}

// (kind, arch) of every entry of every fatbin container in `section`, e.g.
// (kKindElf, 80) for sm_80 code.
std::set<std::pair<uint16_t, uint32_t>> FatbinEntries(
    const std::string& section) {
  std::set<std::pair<uint16_t, uint32_t>> entries;
  uint64_t container = 0;
  uint32_t magic;
  while (ReadAt(section, container, &magic) && magic == kFatbinMagic) {
    uint16_t header_size;
    uint64_t body_size;
    if (!ReadAt(section, container + 6, &header_size) ||
        !ReadAt(section, container + 8, &body_size)) {
      break;
    }
    const uint64_t end = container + header_size + body_size;
    uint64_t entry = container + header_size;
    while (entry < end) {
      uint16_t kind;
      uint32_t entry_header_size, arch;
      uint64_t payload_size;
      if (!ReadAt(section, entry, &kind) ||
          !ReadAt(section, entry + 4, &entry_header_size) ||
          !ReadAt(section, entry + 8, &payload_size) ||
          !ReadAt(section, entry + 0x1c, &arch) || entry_header_size == 0) {
        return entries;
      }
      entries.emplace(kind, arch);
      entry += entry_header_size + payload_size;
    }
    // Containers are 8-byte aligned within the section.
    container = (end + 7) / 8 * 8;
  }
  return entries;
}

TEST(CudaFatbinTest, ObjectHoldsSm80AndSm90CodeAndCompute90Ptx) {
  std::ifstream file(kObjectPath, std::ios::binary);
  ASSERT_TRUE(file) << "cannot open " << kObjectPath;
  const std::string object((std::istreambuf_iterator<char>(file)),
                           std::istreambuf_iterator<char>());
  const std::string fatbin = Section(object, ".nv_fatbin");
  ASSERT_FALSE(fatbin.empty()) << kObjectPath << " has no .nv_fatbin";
  const auto entries = FatbinEntries(fatbin);
  EXPECT_EQ(entries.count({kKindElf, 80}), 1u) << "no sm_80 code";
  EXPECT_EQ(entries.count({kKindElf, 90}), 1u) << "no sm_90 code";
  EXPECT_EQ(entries.count({kKindPtx, 90}), 1u) << "no compute_90 PTX";
  for (const auto& [kind, arch] : entries) {  // For the test log.
    std::cout << (kind == kKindElf   ? "SASS sm_"
                  : kind == kKindPtx ? "PTX compute_"
                                     : "other ")
              << arch << "\n";
  }
}

}  // namespace
