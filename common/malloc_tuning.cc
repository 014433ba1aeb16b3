#include "common/malloc_tuning.h"

#include <malloc.h>

namespace ps {

void KeepFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);   // glibc's largest allowed value.
  mallopt(M_TRIM_THRESHOLD, 512 << 20);  // Trim only beyond this much free.
}

}  // namespace ps
