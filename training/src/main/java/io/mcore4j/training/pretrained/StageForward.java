package io.mcore4j.training.pretrained;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.parallel.ProcessGroups;

import java.util.List;

/**
 * One forward of a batch through the pipeline without gradients: this rank's chunks in virtual-stage
 * order, each receiving its input from the previous pipeline stage (the first stage's chunk {@code v}
 * from the last stage's chunk {@code v - 1}) and sending its output on; then the last chunk's
 * vocabulary shards all-gathered over the tensor-parallel group and the logits broadcast over the
 * pipeline group from the last stage.
 */
final class StageForward {
    private final List<GptModel> chunks;
    private final ProcessGroups groups;
    private final TransformerConfig config;

    StageForward(List<GptModel> chunks, ProcessGroups groups, TransformerConfig config) {
        this.chunks = chunks;
        this.groups = groups;
        this.config = config;
    }

    /**
     * @param manager parent of the forward's temporaries, released before returning
     * @param tokens {@code [batch][seq]} ids, checked
     * @param seq the rows' length
     * @param vocab the columns to keep (the vocabulary without padding)
     * @return {@code [batch][seq][vocab]} logits on every rank
     */
    float[][][] logits(NDManager manager, int[][] tokens, int seq, int vocab) {
        int batch = tokens.length;
        long[] ids = new long[seq * batch]; // [s, b]: the model reads position-major
        for (int b = 0; b < batch; b++) {
            for (int s = 0; s < seq; s++) {
                ids[s * batch + b] = tokens[b][s];
            }
        }
        int pp = groups.dims().pipelineParallel();
        int stage = groups.pipelineRank();
        long padded = config.vocabSize();
        try (AutogradScope scope = AutogradScope.openNoGrad(manager)) {
            NDManager m = scope.manager();
            NDArray input = m.create(ids, new Shape(seq, batch));
            Shape hidden = new Shape(seq, batch, config.hiddenSize());
            NDArray logits = null;
            for (GptModel chunk : chunks) {
                NDArray received = chunk.isPreProcess() ? null : groups.pp().recv(hidden, config.dtype(), (stage + pp - 1) % pp, m);
                NDArray out = chunk.forward(scope, chunk.isPreProcess() ? input : null, received, null);
                if (chunk.isPostProcess()) {
                    logits = out;
                } else {
                    groups.pp().send(out, (stage + 1) % pp);
                }
            }
            NDArray full = logits != null ? groups.tp().allGather(logits, 2, m).toType(DataType.FLOAT32, false)
                    : m.zeros(new Shape(seq, batch, padded), DataType.FLOAT32);
            if (pp > 1) {
                full = groups.pp().broadcast(full, pp - 1, m);
            }
            float[] flat = full.toFloatArray();
            float[][][] out = new float[batch][seq][vocab];
            for (int s = 0; s < seq; s++) {
                for (int b = 0; b < batch; b++) {
                    System.arraycopy(flat, Math.toIntExact(((long) s * batch + b) * padded), out[b][s], 0, vocab);
                }
            }
            return out;
        }
    }
}
