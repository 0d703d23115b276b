// mcore4j's native library: libtorch's at::cuda::CUDAGraph reached from Java (io.mcore4j.cuda.NativeCudaGraphs), and
// the resize of a tensor's storage in place (io.mcore4j.cuda.NativeStorage), neither of which DJL's JNI exposes. Built
// on the GPU host against the libtorch DJL drives (scripts/gpu/build-cuda-graphs.sh), like DJL's own JNI; without it
// mcore4j runs every step eagerly, and ZeRO-3 recomputes every layer.
//
// A capture makes a stream of libtorch's pool the calling thread's current stream (capture needs one other than the
// legacy default stream), allocates what the captured work allocates from a private memory pool (the graph's, kept
// while the graph lives), and restores the previous stream at the end. Replay launches on the caller's current stream.
#include <jni.h>

#include <ATen/Tensor.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <exception>
#include <optional>
#include <string>

namespace {

struct Graph {
  at::cuda::CUDAGraph graph;
  std::optional<c10::cuda::CUDAStream> previous;
  c10::DeviceIndex device = 0;
};

void throwJava(JNIEnv* env, const std::string& message) {
  jclass cls = env->FindClass("java/lang/IllegalStateException");
  if (cls != nullptr) {
    env->ThrowNew(cls, message.c_str());
  }
}

template <typename F>
auto guarded(JNIEnv* env, const char* what, F body) -> decltype(body()) {
  try {
    return body();
  } catch (const c10::Error& e) {
    throwJava(env, std::string(what) + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throwJava(env, std::string(what) + ": " + e.what());
  }
  return decltype(body())();
}

}  // namespace

extern "C" {

JNIEXPORT jlong JNICALL Java_io_mcore4j_cuda_NativeCudaGraphs_create(JNIEnv* env, jclass, jint device) {
  return guarded(env, "CUDA graph create", [&]() -> jlong {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    auto* g = new Graph();
    g->device = static_cast<c10::DeviceIndex>(device);
    return reinterpret_cast<jlong>(g);
  });
}

JNIEXPORT jlong JNICALL Java_io_mcore4j_cuda_NativeCudaGraphs_captureBegin(JNIEnv* env, jclass, jlong handle) {
  return guarded(env, "CUDA graph capture begin", [&]() -> jlong {
    auto* g = reinterpret_cast<Graph*>(handle);
    c10::cuda::CUDAGuard guard(g->device);
    g->previous = c10::cuda::getCurrentCUDAStream(g->device);
    c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, g->device);
    // the capture stream starts after what the previous stream has queued (eager work the capture reads)
    cudaEvent_t ready;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    C10_CUDA_CHECK(cudaEventRecord(ready, g->previous->stream()));
    C10_CUDA_CHECK(cudaStreamWaitEvent(stream.stream(), ready, 0));
    C10_CUDA_CHECK(cudaEventDestroy(ready));
    c10::cuda::setCurrentCUDAStream(stream);
    try {
      g->graph.capture_begin(at::cuda::graph_pool_handle(), cudaStreamCaptureModeThreadLocal);
    } catch (...) {
      c10::cuda::setCurrentCUDAStream(*g->previous);
      g->previous.reset();
      throw;
    }
    return reinterpret_cast<jlong>(stream.stream());
  });
}

JNIEXPORT void JNICALL Java_io_mcore4j_cuda_NativeCudaGraphs_captureEnd(JNIEnv* env, jclass, jlong handle) {
  guarded(env, "CUDA graph capture end", [&]() -> int {
    auto* g = reinterpret_cast<Graph*>(handle);
    c10::cuda::CUDAGuard guard(g->device);
    try {
      g->graph.capture_end();
    } catch (...) {
      if (g->previous) {
        c10::cuda::setCurrentCUDAStream(*g->previous);
        g->previous.reset();
      }
      throw;
    }
    if (g->previous) {
      c10::cuda::setCurrentCUDAStream(*g->previous);
      g->previous.reset();
    }
    return 0;
  });
}

JNIEXPORT void JNICALL Java_io_mcore4j_cuda_NativeCudaGraphs_replay(JNIEnv* env, jclass, jlong handle) {
  guarded(env, "CUDA graph replay", [&]() -> int {
    auto* g = reinterpret_cast<Graph*>(handle);
    c10::cuda::CUDAGuard guard(g->device);
    g->graph.replay();
    return 0;
  });
}

JNIEXPORT void JNICALL Java_io_mcore4j_cuda_NativeCudaGraphs_destroy(JNIEnv* env, jclass, jlong handle) {
  guarded(env, "CUDA graph destroy", [&]() -> int {
    auto* g = reinterpret_cast<Graph*>(handle);
    c10::cuda::CUDAGuard guard(g->device);
    if (g->previous) {
      c10::cuda::setCurrentCUDAStream(*g->previous);
    }
    delete g;
    return 0;
  });
}

JNIEXPORT void JNICALL Java_io_mcore4j_cuda_NativeCudaGraphs_emptyCache(JNIEnv* env, jclass) {
  guarded(env, "CUDA caching allocator emptyCache", [&]() -> int {
    c10::cuda::CUDACachingAllocator::emptyCache();
    return 0;
  });
}

// Frees (nbytes 0) or reallocates the memory of a tensor's storage without touching the tensor: the StorageImpl every
// tensor over that memory shares gets a new DataPtr from its own allocator (the caching allocator on the current
// stream), the old one goes back to it. Shape, strides and version counters stay; the contents are not kept.
// jhandle is DJL's tensor handle (a torch::Tensor*).
JNIEXPORT void JNICALL Java_io_mcore4j_cuda_NativeStorage_resize(JNIEnv* env, jclass, jlong jhandle, jlong nbytes) {
  guarded(env, "storage resize", [&]() -> int {
    const auto* tensor = reinterpret_cast<at::Tensor*>(jhandle);
    c10::StorageImpl* storage = tensor->storage().unsafeGetStorageImpl();
    TORCH_CHECK(storage->resizable(), "the tensor's storage is not resizable");
    if (static_cast<jlong>(storage->nbytes()) == nbytes) {
      return 0;
    }
    std::optional<c10::cuda::CUDAGuard> guard;
    if (tensor->is_cuda()) {
      guard.emplace(tensor->device().index());
    }
    if (nbytes == 0) {
      storage->set_data_ptr_noswap(at::DataPtr(nullptr, tensor->device()));
    } else {
      storage->set_data_ptr_noswap(storage->allocator()->allocate(static_cast<size_t>(nbytes)));
    }
    storage->set_nbytes(static_cast<size_t>(nbytes));
    return 0;
  });
}

}  // extern "C"
