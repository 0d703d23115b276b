package io.mcore4j.checkpoint;

/**
 * What a checkpoint records of one tensor without reading it: its dtype and global shape.
 *
 * @param key the tensor's key
 * @param dtype its stored dtype
 * @param shape its global shape (a copy)
 */
public record StoredTensorInfo(String key, SafetensorsDtype dtype, long[] shape) {
    /** Copies the shape. */
    public StoredTensorInfo {
        shape = shape.clone();
    }

    @Override
    public long[] shape() {
        return shape.clone();
    }
}
