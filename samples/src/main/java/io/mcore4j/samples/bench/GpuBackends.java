package io.mcore4j.samples.bench;

import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.launch.LaunchEnvironment;
import io.mcore4j.parallel.nccl.NcclBackend;

import java.time.Duration;

/**
 * Connects the NCCL backend for a launched multi-GPU run. Kept in its own class so that the CUDA
 * classes load only when a multi-GPU run asks for them.
 */
final class GpuBackends {
    private GpuBackends() {}

    static Backend connect(Duration timeout) {
        return NcclBackend.connect(LaunchEnvironment.fromSystem(), timeout);
    }
}
