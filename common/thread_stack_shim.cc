// Debian's civetweb (the HTTP server under prometheus-cpp's Exposer) starts
// its threads with a fixed 100 KiB stack (pthread_attr_setstacksize). glibc
// takes the process's static TLS out of a thread's stack, and a binary that
// links cuBLAS has more static TLS than that, so every civetweb thread fails
// to start (EINVAL) and the metrics endpoint with them. This definition,
// which the dynamic linker prefers to libc's, gives such a request the stack
// it asked for on top of the static TLS.

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <cerrno>
#include <cstddef>

namespace {

int AddTls(dl_phdr_info* info, size_t /*size*/, void* total) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& h = info->dlpi_phdr[i];
    if (h.p_type == PT_TLS) {
      *static_cast<size_t*>(total) += h.p_memsz + h.p_align;
    }
  }
  return 0;
}

// The TLS of every object loaded at startup: an upper bound on glibc's
// static TLS block.
size_t StartupTlsBytes() {
  size_t total = 0;
  dl_iterate_phdr(&AddTls, &total);
  return total;
}

}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr,
                                         size_t stacksize) {
  using SetStackSize = int (*)(pthread_attr_t*, size_t);
  // Both computed once, on the first call (thread-safe static init).
  static const SetStackSize libc_set = reinterpret_cast<SetStackSize>(
      dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  static const size_t tls_bytes = StartupTlsBytes();
  if (libc_set == nullptr) return ENOSYS;
  return libc_set(attr, stacksize + tls_bytes);
}
