#ifndef PS_COMMON_MALLOC_TUNING_H_
#define PS_COMMON_MALLOC_TUNING_H_

namespace ps {

// gRPC allocates a buffer of about a message (1 MiB) for every message
// received or sent, and glibc by default gives freed memory back to the
// kernel (trimming heaps; mapping blocks above a moving threshold afresh),
// so every transfer faulted its pages in again inside recvmsg/sendmsg: ~15%
// of a shard's CPU at 64 MiB pushes. Keeps freed memory instead, at most a
// few transfers' worth. Called first thing in main, by servers and workers.
void KeepFreedMemory();

}  // namespace ps

#endif  // PS_COMMON_MALLOC_TUNING_H_
