package io.mcore4j.samples.bench;

import io.mcore4j.parallel.Backend;

import java.time.Duration;

/** Connects the GPU communication backend; until one is on the class path, multi-GPU runs are refused. */
final class GpuBackends {
    private GpuBackends() {}

    static Backend connect(Duration timeout) {
        throw new IllegalStateException("multi-GPU benchmark runs need the NCCL backend (mcore4j-nccl)");
    }
}
