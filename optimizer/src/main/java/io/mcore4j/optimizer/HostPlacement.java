package io.mcore4j.optimizer;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;

import java.util.List;

/**
 * The host's share of the optimizer state under {@link OptimizerConfig#optimizerCpuOffload()}
 * (Megatron's hybrid device optimizer): which bucket shards keep their fp32 master weights and
 * moments on the host, and the manager on the CPU that owns them. The optimizer keeps one flat state
 * per bucket shard, in its own order (bucket by bucket, the order of {@link DistributedDataParallel#buckets()});
 * Megatron's rule picks in that order: a shard goes to the host while fewer than
 * {@code fraction x total} of this rank's state elements are there, so the host holds at least that
 * share, by at most one shard more. The unit is a bucket shard where Megatron's is a parameter:
 * smaller buckets ({@link OptimizerConfig#bucketSizeBytes()}) give a finer split.
 *
 * <p>Host tensors live in pageable memory: DJL offers no pinned allocation, so each copy between
 * host and device waits for the device's queued work. The step is ordered so that the host update
 * runs while the device updates the shards it kept.
 *
 * <p>Owns nothing beyond {@link #manager()}, a child of the optimizer's manager that closes with it.
 */
final class HostPlacement {
    private final boolean[] onHost;
    private final NDManager manager;

    private HostPlacement(boolean[] onHost, NDManager manager) {
        this.onHost = onHost;
        this.manager = manager;
    }

    /**
     * The placement of shards of the given sizes.
     *
     * @param shardNumels each bucket shard's number of state elements, in the optimizer's order
     * @param config the optimizer options: nothing goes to the host unless {@code optimizerCpuOffload}
     * @param parent the optimizer's manager; the host manager is its child on the CPU
     * @return the placement
     */
    static HostPlacement of(List<Long> shardNumels, OptimizerConfig config, NDManager parent) {
        boolean[] onHost = config.optimizerCpuOffload()
                ? chooseHostShards(shardNumels, config.optimizerOffloadFraction()) : new boolean[shardNumels.size()];
        NDManager manager = parent.newSubManager(Device.cpu());
        manager.setName("optimizer-host-state");
        return new HostPlacement(onHost, manager);
    }

    /**
     * Megatron's rule: in order, a shard goes to the host while the host holds fewer than
     * {@code fraction x total} elements.
     *
     * @param shardNumels each shard's number of elements
     * @param fraction in (0, 1]
     * @return per shard, whether it goes to the host
     */
    static boolean[] chooseHostShards(List<Long> shardNumels, double fraction) {
        long total = 0;
        for (long n : shardNumels) {
            total += n;
        }
        double threshold = fraction * total;
        boolean[] out = new boolean[shardNumels.size()];
        long held = 0;
        for (int i = 0; i < out.length; i++) {
            if (held < threshold) {
                out[i] = true;
                held += shardNumels.get(i);
            }
        }
        return out;
    }

    /**
     * @param shard a shard's index in the optimizer's order
     * @return whether its state lives on the host
     */
    boolean onHost(int shard) {
        return onHost[shard];
    }

    /** @return whether any shard lives on the host */
    boolean any() {
        for (boolean b : onHost) {
            if (b) {
                return true;
            }
        }
        return false;
    }

    /** @return the manager on the CPU that owns the host state; closed with the optimizer's manager */
    NDManager manager() {
        return manager;
    }

    /**
     * @param t a tensor
     * @return whether {@link #manager()} owns it
     */
    boolean owns(NDArray t) {
        return t.getManager() == manager;
    }

    /**
     * A copy of {@code x} on the host, owned by {@code owner} (a manager on the CPU).
     *
     * @param x a tensor on any device
     * @param owner the manager that owns the copy
     * @return the copy, same dtype and shape
     */
    static NDArray toHost(NDArray x, NDManager owner) {
        return Tensors.own(DataTypes.toDevice(x, Device.cpu(), true), owner);
    }
}
