package io.mcore4j.samples.generate;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.hf.HfConfig;
import io.mcore4j.tensorparallel.MlpActivation;
import io.mcore4j.checkpoint.CheckpointManager;
import io.mcore4j.checkpoint.DistCheckpointing;
import io.mcore4j.checkpoint.StoredTensorInfo;
import io.mcore4j.models.TransformerConfig;

import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A GPT's shape as a pretrain-gpt checkpoint records it: the global shapes and dtypes of its
 * {@code model.} tensors in its metadata. From them come the layer count, widths, (padded)
 * vocabulary, MLP kind, norm kind, biases, tied or untied output layer, position embedding and query
 * groups and query/key norms; the attention-head count, which no shape records, is given by the caller. A
 * {@code convert-hf} checkpoint also holds its Hugging Face config, which gives the whole model.
 *
 * @param directory the checkpoint directory read (an {@code iter_*} directory)
 * @param shapes global shape by tensor key
 * @param dtypes safetensors dtype name by tensor key
 */
record CheckpointShapes(Path directory, Map<String, long[]> shapes, Map<String, String> dtypes) {
    private static final String PREFIX = "model.";
    private static final Pattern LAYER = Pattern.compile("^model\\.decoder\\.layers\\.(\\d+)\\.");

    /**
     * Reads the newest complete checkpoint under {@code load} (a {@code --save} directory), or
     * {@code load} itself if it is one checkpoint.
     *
     * @param load the directory
     * @return the shapes
     * @throws IllegalArgumentException if there is no complete checkpoint or it holds no GPT
     */
    static CheckpointShapes read(Path load) {
        Path dir = DistCheckpointing.isComplete(load) ? load
                : new CheckpointManager(load, Integer.MAX_VALUE).latest()
                        .orElseThrow(() -> new IllegalArgumentException("--load " + load + " holds no complete checkpoint"));
        Map<String, long[]> shapes = new HashMap<>();
        Map<String, String> dtypes = new HashMap<>();
        for (StoredTensorInfo t : DistCheckpointing.storedTensors(dir).values()) {
            if (t.key().startsWith(PREFIX)) {
                shapes.put(t.key(), t.shape());
                dtypes.put(t.key(), t.dtype().name());
            }
        }
        if (!shapes.containsKey(PREFIX + "embedding.word_embeddings.weight")) {
            throw new IllegalArgumentException("checkpoint " + dir + " holds no model.embedding.word_embeddings.weight:"
                    + " not a pretrain-gpt checkpoint");
        }
        return new CheckpointShapes(dir, shapes, dtypes);
    }

    /**
     * The model config the checkpoint was trained with.
     *
     * @param heads attention heads
     * @param maxSequenceLength positions for a rotary model (a learned table's size comes from the checkpoint)
     * @param rotaryBase RoPE base
     * @param normEpsilon norm epsilon
     * @return the config, without dropout or sequence parallelism
     * @throws IllegalArgumentException if the heads do not fit the stored widths
     */
    TransformerConfig config(int heads, int maxSequenceLength, double rotaryBase, double normEpsilon) {
        long[] word = shape("embedding.word_embeddings.weight");
        int vocab = (int) word[0];
        int hidden = (int) word[1];
        int layers = 0;
        for (String key : shapes.keySet()) {
            Matcher m = LAYER.matcher(key);
            if (m.find()) {
                layers = Math.max(layers, Integer.parseInt(m.group(1)) + 1);
            }
        }
        if (layers == 0) {
            throw new IllegalArgumentException("checkpoint " + directory + " holds no decoder layers");
        }
        // query and key norms are one head wide: with them the head width need not be hidden / heads (Qwen3)
        long[] queryNorm = shapes.get(PREFIX + "decoder.layers.0.self_attention.q_layernorm.weight");
        if (queryNorm == null && hidden % heads != 0) {
            throw new IllegalArgumentException("--num-attention-heads " + heads + " does not divide the checkpoint's hidden size " + hidden);
        }
        int kv = queryNorm != null ? (int) queryNorm[0] : hidden / heads;
        long qkvRows = shape("decoder.layers.0.self_attention.linear_qkv.weight")[0];
        long groups2 = qkvRows / kv - heads;
        if (qkvRows % kv != 0 || groups2 <= 0 || groups2 % 2 != 0) {
            throw new IllegalArgumentException("--num-attention-heads " + heads + " does not match the checkpoint's fused QKV of "
                    + qkvRows + " rows at hidden size " + hidden);
        }
        int ffn = (int) shape("decoder.layers.0.mlp.linear_fc2.weight")[1];
        boolean swiglu = shape("decoder.layers.0.mlp.linear_fc1.weight")[0] == 2L * ffn;
        boolean layerNorm = has("decoder.layers.0.input_layernorm.bias");
        long[] position = shapes.get(PREFIX + "embedding.position_embeddings.weight");
        TransformerConfig.Builder b = TransformerConfig.builder(layers, hidden, heads, vocab)
                .queryGroups((int) (groups2 / 2)).ffnHiddenSize(ffn).kvChannels(kv)
                .maxSequenceLength(position != null ? (int) position[0] : maxSequenceLength)
                .normalization(layerNorm ? TransformerConfig.Normalization.LAYER_NORM : TransformerConfig.Normalization.RMS_NORM, normEpsilon)
                .positionEmbedding(position != null ? TransformerConfig.PositionEmbedding.LEARNED_ABSOLUTE : TransformerConfig.PositionEmbedding.ROPE)
                .rotary(rotaryBase, 1.0)
                .activation(swiglu ? MlpActivation.SWIGLU : MlpActivation.GELU)
                .addBiasLinear(has("decoder.layers.0.self_attention.linear_qkv.bias"))
                .qkLayernorm(has("decoder.layers.0.self_attention.q_layernorm.weight"))
                .tiedEmbeddings(!has("output_layer.weight"))
                .dropout(0, 0)
                .dtype(dtype());
        return b.build();
    }

    /**
     * The Hugging Face config {@code convert-hf} stored in the checkpoint ({@code hf_config}), which knows what no
     * shape records (sliding windows, zero-centred norms, scales, rotary bases), or null for a pretrain-gpt checkpoint.
     *
     * @return the config, or null
     * @throws IllegalArgumentException naming the checkpoint when the stored config is not one mcore4j maps
     */
    HfConfig storedHfConfig() {
        return HfConfig.recordedIn(directory, DistCheckpointing.loadCommonState(directory));
    }

    /**
     * The model of a stored Hugging Face config, with the checkpoint's padded vocabulary and dtype.
     *
     * @param stored the checkpoint's {@link #storedHfConfig()}
     * @return the config
     */
    TransformerConfig config(HfConfig stored) {
        return stored.transformerConfigPaddedTo((int) shape("embedding.word_embeddings.weight")[0], dtype());
    }

    private DataType dtype() {
        return "F16".equals(dtypes.get(PREFIX + "embedding.word_embeddings.weight")) ? DataType.FLOAT16 : DataType.FLOAT32;
    }

    private boolean has(String key) {
        return shapes.containsKey(PREFIX + key);
    }

    private long[] shape(String key) {
        long[] s = shapes.get(PREFIX + key);
        if (s == null) {
            throw new IllegalArgumentException("checkpoint " + directory + " has no " + PREFIX + key);
        }
        return s;
    }
}
