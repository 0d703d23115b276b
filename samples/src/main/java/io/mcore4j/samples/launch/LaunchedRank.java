package io.mcore4j.samples.launch;

import ai.djl.Device;
import ai.djl.engine.Engine;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.inprocess.InJvmFabric;
import io.mcore4j.parallel.launch.LaunchEnvironment;
import io.mcore4j.parallel.nccl.NcclBackend;
import io.mcore4j.parallel.tcp.TcpBackend;

import java.time.Duration;
import java.util.Locale;

/**
 * The backend and device of a rank started by a launcher (torchrun, srun, mpirun,
 * {@link LocalLauncher}): NCCL on the GPU {@code LOCAL_RANK} when this process sees CUDA devices,
 * TCP on the CPU otherwise. {@code MCORE4J_DEVICE=cpu} forces the CPU path on a GPU machine. The
 * NCCL classes load only on the GPU path.
 *
 * @param backend the rank's communication backend
 * @param device where its tensors live
 */
public record LaunchedRank(Backend backend, Device device) {

    /**
     * Connects this process's rank.
     *
     * @param timeout how long blocking operations wait for peers
     * @return the rank; close its backend when done
     */
    public static LaunchedRank connect(Duration timeout) {
        Mcore4j.ensureInitialized();
        LaunchEnvironment env = LaunchEnvironment.fromSystem();
        if (onGpu()) {
            NcclBackend nccl = NcclBackend.connect(env, timeout);
            return new LaunchedRank(nccl, nccl.device());
        }
        return new LaunchedRank(TcpBackend.connect(env, timeout), Device.cpu());
    }

    /**
     * The only rank of a world of one in this JVM (no launcher): on the GPU when {@link #onGpu()}, else the CPU.
     *
     * @param timeout how long blocking operations wait
     * @return the rank
     */
    public static LaunchedRank single(Duration timeout) {
        return new LaunchedRank(new InJvmFabric(1, timeout).backend(0), onGpu() ? Device.gpu() : Device.cpu());
    }

    /** @return whether a single or launched rank runs on a GPU: CUDA is visible and MCORE4J_DEVICE is not cpu */
    public static boolean onGpu() {
        return !System.getenv().getOrDefault("MCORE4J_DEVICE", "").toLowerCase(Locale.ROOT).equals("cpu")
                && Engine.getInstance().getGpuCount() > 0;
    }
}
