package io.mcore4j.models.gpt;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;

/** Deterministic token batches for model tests. */
final class TokenBatches {
    private TokenBatches() {}

    /**
     * Ids {@code (i * stride + offset) % vocab} laid out as {@code [seq + 1, batch]}, split into the
     * inputs (positions {@code [0, seq)}) and the labels (positions {@code [1, seq]}).
     */
    static NDArray[] shifted(NDManager m, int vocab, int seq, int batch, int stride, int offset) {
        int[] ids = new int[(seq + 1) * batch];
        for (int i = 0; i < ids.length; i++) {
            ids[i] = (i * stride + offset) % vocab;
        }
        NDArray all = m.create(ids, new Shape(seq + 1, batch)).toType(DataType.INT64, false);
        return new NDArray[] {all.get("0:" + seq), all.get("1:" + (seq + 1))};
    }
}
