package io.mcore4j.models;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.tensorparallel.MlpActivation;

/**
 * Recipes of well-known GPT shapes, for planning and benchmarks. Only small ones are instantiated
 * in tests; the large ones describe shapes whose FLOPs and memory a user wants to estimate.
 */
public final class GptConfigs {
    private GptConfigs() {}

    /** @return GPT-2 small: 12 layers, h 768, 12 heads, vocab 50304 (50257 padded), seq 1024 */
    public static TransformerConfig gpt2Small() {
        return TransformerConfig.builder(12, 768, 12, 50304).maxSequenceLength(1024).build();
    }

    /** @return the 1.3B anchor model of the GPU benchmark: L 24, h 2048, 16 heads, ffn 8192, seq 2048, vocab 32768, fp16, no dropout */
    public static TransformerConfig gpt1_3b() {
        return TransformerConfig.builder(24, 2048, 16, 32768).ffnHiddenSize(8192).maxSequenceLength(2048)
                .dropout(0, 0).dtype(DataType.FLOAT16).build();
    }

    /** @return a LLaMA-style 7B shape: L 32, h 4096, 32 heads, SwiGLU ffn 11008, RMSNorm, RoPE, no biases, untied, seq 2048, vocab 32000 */
    public static TransformerConfig llama7b() {
        return TransformerConfig.builder(32, 4096, 32, 32000).ffnHiddenSize(11008).maxSequenceLength(2048)
                .normalization(TransformerConfig.Normalization.RMS_NORM, 1e-5)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE)
                .activation(MlpActivation.SWIGLU).addBiasLinear(false).tiedEmbeddings(false)
                .dropout(0, 0).dtype(DataType.FLOAT16).build();
    }

    /**
     * A tiny model for tests and the CPU sample.
     *
     * @param vocabSize vocabulary
     * @param seqLength sequence length
     * @return 4 layers, h 64, 4 heads, no dropout, fp32
     */
    public static TransformerConfig tiny(int vocabSize, int seqLength) {
        return TransformerConfig.builder(4, 64, 4, vocabSize).maxSequenceLength(seqLength).dropout(0, 0).build();
    }
}
