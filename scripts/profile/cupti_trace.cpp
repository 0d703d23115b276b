// A CUDA activity tracer for hosts without Nsight Systems. Preloaded into a process
// (LD_PRELOAD=libcupti_trace.so CUPTI_TRACE_DIR=dir), it writes every kernel, memcpy and memset
// (device start/end in ns, stream, correlation id, name) and every CUDA runtime/driver call that
// took longer than 20 us (a host wait shows up as one) to dir/trace.<pid>.txt, one record per line:
//   K|C|S|A start end stream-or-thread correlation name
// Nothing is recorded unless CUPTI_TRACE_DIR is set. Written for CUDA 13 (CUpti_ActivityKernel10).
#include <cupti.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unistd.h>
static FILE* out = nullptr;
static std::mutex lock;
#define CK(x) do { CUptiResult r = (x); if (r != CUPTI_SUCCESS) { const char* s; cuptiGetResultString(r, &s); fprintf(stderr, "cupti %s: %s\n", #x, s); } } while (0)
static void CUPTIAPI requested(uint8_t** buf, size_t* size, size_t* max) {
  *size = 16 << 20; *buf = (uint8_t*) aligned_alloc(8, *size); *max = 0;
}
static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  std::lock_guard<std::mutex> g(lock);
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        auto* k = (CUpti_ActivityKernel10*) rec;
        fprintf(out, "K %llu %llu %u %u %.150s\n", (unsigned long long) k->start, (unsigned long long) k->end,
                k->streamId, k->correlationId, k->name ? k->name : "?");
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = (CUpti_ActivityMemcpy6*) rec;
        fprintf(out, "C %llu %llu %u %u kind%u_%llu\n", (unsigned long long) m->start, (unsigned long long) m->end,
                m->streamId, m->correlationId, (unsigned) m->copyKind, (unsigned long long) m->bytes);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = (CUpti_ActivityMemset4*) rec;
        fprintf(out, "S %llu %llu %u %u memset_%llu\n", (unsigned long long) m->start, (unsigned long long) m->end,
                m->streamId, m->correlationId, (unsigned long long) m->bytes);
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        auto* a = (CUpti_ActivityAPI*) rec;
        if (a->end - a->start > 20000) {
          const char* name = "?";
          cuptiGetCallbackName(rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API,
                               a->cbid, &name);
          fprintf(out, "A %llu %llu %u %u %s\n", (unsigned long long) a->start, (unsigned long long) a->end,
                  a->threadId, a->correlationId, name);
        }
        break;
      }
      default: break;
    }
  }
  free(buf);
}
__attribute__((constructor)) static void start() {
  const char* dir = getenv("CUPTI_TRACE_DIR");
  if (!dir) return;
  char path[512]; snprintf(path, sizeof path, "%s/trace.%d.txt", dir, getpid());
  out = fopen(path, "w");
  if (!out) return;
  setvbuf(out, nullptr, _IOFBF, 1 << 22);
  CK(cuptiActivityRegisterCallbacks(requested, completed));
  CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
  CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
  CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME));
  CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
}
__attribute__((destructor)) static void stop() {
  if (!out) return;
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> g(lock);
  fclose(out); out = nullptr;
}
