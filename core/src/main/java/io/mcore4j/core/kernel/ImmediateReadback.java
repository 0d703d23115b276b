package io.mcore4j.core.kernel;

import ai.djl.ndarray.NDArray;

/**
 * The {@link HostReadback.Buffer} of a device without a readback (the CPU, whose tensors the host reads directly):
 * {@link #copyFrom} reads at once.
 */
final class ImmediateReadback implements HostReadback.Buffer {
    private long[] values;

    @Override
    public void copyFrom(NDArray source) {
        values = source.toLongArray();
    }

    @Override
    public long[] await() {
        if (values == null) {
            throw new IllegalStateException("no copy was queued into this readback buffer");
        }
        return values;
    }

    @Override
    public void close() {
        values = null;
    }
}
