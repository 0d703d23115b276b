package io.mcore4j.hf;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import io.mcore4j.models.TransformerConfig;

import java.util.ArrayList;
import java.util.List;

/**
 * Typed access to a {@code config.json}'s values, errors naming file and key; JSON nulls count as absent. Also
 * reads the two structured values several architectures share: {@code layer_types} and a set of RoPE parameters.
 */
final class ConfigReader {
    /** {@code layer_types} entries. */
    static final String FULL = "full_attention";
    static final String SLIDING = "sliding_attention";

    /**
     * A RoPE base and its scaling (linear, LLaMA 3.1's or YaRN's).
     *
     * @param theta the base
     * @param scaling the scaling, or null
     */
    record Rope(double theta, TransformerConfig.RopeScaling scaling) {}

    final String file;
    final JsonObject json;

    ConfigReader(String file, JsonObject json) {
        this.file = file;
        this.json = json;
    }

    boolean has(String key) {
        return json.has(key) && !json.get(key).isJsonNull();
    }

    JsonElement get(String key) {
        if (!has(key)) {
            throw new HfCheckpointException(file + ": required key \"" + key + "\" is missing");
        }
        return json.get(key);
    }

    int integer(String key) {
        return typed(key, "a non-negative integer", e -> {
            double v = e.getAsDouble();
            if (v != Math.rint(v) || v < 0 || v > Integer.MAX_VALUE) {
                throw new NumberFormatException(String.valueOf(v));
            }
            return (int) v;
        });
    }

    int integerOr(String key, int fallback) {
        return has(key) ? integer(key) : fallback;
    }

    /**
     * An integer that transformers also reads under a second name: {@code key}, else {@code alias}; where both are
     * given they must be equal.
     *
     * @param key the architecture's own name (DeepSeek-V3's {@code n_routed_experts})
     * @param alias the name transformers reads it as (its {@code num_local_experts})
     * @return the value
     * @throws HfCheckpointException if neither is given, or both are and differ
     */
    int integerAlias(String key, String alias) {
        int value = has(key) ? integer(key) : integer(alias);
        if (has(key) && has(alias)) {
            require(alias, integer(alias) == value, "equal to " + key + " (" + value + "), which transformers reads as "
                    + alias);
        }
        return value;
    }

    double number(String key) {
        return typed(key, "a number", JsonElement::getAsDouble);
    }

    /** A required value read by {@code read}; a value it cannot read is an error naming key, kind and value. */
    private <T> T typed(String key, String kind, java.util.function.Function<JsonElement, T> read) {
        JsonElement e = get(key);
        try {
            return read.apply(e);
        } catch (RuntimeException ex) {
            throw new HfCheckpointException(file + ": \"" + key + "\" must be " + kind + ", got " + e);
        }
    }

    double numberOr(String key, double fallback) {
        return has(key) ? number(key) : fallback;
    }

    boolean boolOr(String key, boolean fallback) {
        if (!has(key)) {
            return fallback;
        }
        JsonElement e = json.get(key);
        if (!e.isJsonPrimitive() || !e.getAsJsonPrimitive().isBoolean()) {
            throw new HfCheckpointException(file + ": \"" + key + "\" must be true or false, got " + e);
        }
        return e.getAsBoolean();
    }

    String string(String key) {
        return get(key).getAsString();
    }

    String stringOr(String key, String fallback) {
        return has(key) ? string(key) : fallback;
    }

    void require(String key, boolean ok, String expected) {
        if (!ok) {
            throw new HfCheckpointException(file + ": \"" + key + "\" = " + json.get(key) + " is not supported: expected "
                    + expected);
        }
    }

    TransformerConfig build(TransformerConfig.Builder b) {
        try {
            return b.build();
        } catch (IllegalArgumentException e) {
            throw new HfCheckpointException(file + ": " + e.getMessage(), e);
        }
    }

    /**
     * @param layers the model's layers
     * @return {@code layer_types}, each {@link #FULL} or {@link #SLIDING}, one per layer; empty when absent
     */
    List<String> layerTypes(int layers) {
        List<String> types = new ArrayList<>();
        if (has("layer_types")) {
            for (JsonElement t : json.getAsJsonArray("layer_types")) {
                String type = t.getAsString();
                require("layer_types", type.equals(FULL) || type.equals(SLIDING), "\"" + FULL + "\" or \"" + SLIDING
                        + "\" for each layer");
                types.add(type);
            }
            require("layer_types", types.size() == layers, "one entry per layer (" + layers + ")");
        }
        return types;
    }

    /**
     * One set of RoPE parameters: a {@code rope_parameters} object (transformers 5) or {@code rope_scaling}
     * (transformers 4) of type {@code default}, {@code linear}, {@code llama3} or {@code yarn} ({@link #yarn}), its
     * {@code rope_theta} where it has one.
     *
     * @param key the object's name, for errors
     * @param params the object, or null for none
     * @param theta the base where the object names none
     * @return the base and scaling
     * @throws HfCheckpointException for another rope type
     */
    Rope rope(String key, JsonObject params, double theta) {
        return rope(key, params, theta, false);
    }

    /**
     * One set of RoPE parameters, as {@link #rope(String, JsonObject, double)} reads them.
     *
     * @param key the object's name, for errors
     * @param params the object, or null for none
     * @param theta the base where the object names none
     * @param yarnAllowed whether {@code yarn} may be read (mcore4j implements it for multi-latent attention only)
     * @return the base and scaling
     * @throws HfCheckpointException for another rope type, or {@code yarn} where it is not allowed
     */
    Rope rope(String key, JsonObject params, double theta, boolean yarnAllowed) {
        if (params == null) {
            return new Rope(theta, null);
        }
        ConfigReader p = new ConfigReader(file + " " + key, params);
        double base = p.numberOr("rope_theta", theta);
        String type = p.stringOr("rope_type", p.stringOr("type", "default"));
        if (type.equals("default")) {
            return new Rope(base, null);
        }
        if (type.equals("linear")) {
            return new Rope(base, TransformerConfig.RopeScaling.linear(p.number("factor")));
        }
        if (type.equals("yarn")) {
            p.require("rope_type", yarnAllowed, "\"default\", \"linear\" or \"llama3\", got \"yarn\" (mcore4j implements"
                    + " yarn for multi-latent attention, DeepseekV3ForCausalLM, only)");
            return new Rope(base, yarn(p));
        }
        p.require("rope_type", type.equals("llama3"), "\"default\", \"linear\", \"llama3\" or \"yarn\", got \"" + type
                + "\"");
        return new Rope(base, new TransformerConfig.RopeScaling(p.number("factor"), p.number("low_freq_factor"),
                p.number("high_freq_factor"), p.integer("original_max_position_embeddings")));
    }

    /**
     * transformers' YaRN parameters as Megatron-Core's: {@code factor}, {@code original_max_position_embeddings},
     * {@code beta_fast} and {@code beta_slow} (default 32 and 1) as they are. transformers multiplies cos and sin by
     * {@code get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)} where both are set and non-zero, else by
     * {@code get_mscale(factor)}; Megatron always by the quotient with its defaults {@code mscale} 1 and
     * {@code mscale_all_dim} 0: equal where both are set, or where {@code mscale_all_dim} is not (both then use
     * mscale 1 and no softmax factor). Refused: {@code mscale_all_dim} without {@code mscale}, an explicit
     * {@code attention_factor}, {@code truncate} false.
     */
    private static TransformerConfig.RopeScaling yarn(ConfigReader p) {
        p.require("attention_factor", !p.has("attention_factor"), "absent (an explicit YaRN attention factor has no"
                + " Megatron-Core counterpart; it follows from mscale and mscale_all_dim)");
        p.require("truncate", p.boolOr("truncate", true), "true (Megatron-Core's YaRN floors and ceils the correction"
                + " range)");
        double mscale = p.numberOr("mscale", 0);
        double mscaleAllDim = p.numberOr("mscale_all_dim", 0);
        p.require("mscale_all_dim", mscaleAllDim == 0 || mscale != 0, "0 or absent without an mscale (transformers then"
                + " scales cos and sin by get_mscale(factor) alone, which Megatron-Core cannot express)");
        double betaFast = p.numberOr("beta_fast", 0);
        double betaSlow = p.numberOr("beta_slow", 0);
        return TransformerConfig.RopeScaling.yarn(p.number("factor"), p.integer("original_max_position_embeddings"),
                betaFast == 0 ? 32 : betaFast, betaSlow == 0 ? 1 : betaSlow, mscaleAllDim == 0 ? 1 : mscale, mscaleAllDim);
    }
}
