package io.mcore4j.models.transformer;

import java.util.Arrays;
import java.util.Collections;
import java.util.EnumSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * LoRA's settings (Megatron Bridge's {@code LoRA} config and PEFT's {@code LoraConfig}): the rank
 * {@code dim}, {@code alpha} (the adapters' output is scaled by {@code alpha / dim}), the dropout on
 * the adapters' input, and which linears of every transformer layer get an adapter.
 * {@link LayerSpec#withLora} applies it.
 *
 * @param dim the adapters' rank {@code r}, at least 1 (Megatron Bridge's {@code dim}, PEFT's {@code r})
 * @param alpha the scaling numerator, positive
 * @param dropout dropout probability on the adapters' input, in [0, 1)
 * @param targetModules the linears that get adapters, not empty
 */
public record LoraConfig(int dim, double alpha, double dropout, Set<Target> targetModules) {

    /** A linear an adapter can wrap, under Megatron-Core's module name. */
    public enum Target {
        /** The fused query/key/value projection (Hugging Face's q_proj, k_proj, v_proj). */
        LINEAR_QKV,
        /** The attention output projection (o_proj). */
        LINEAR_PROJ,
        /** The first MLP linear (gate_proj and up_proj fused for SwiGLU). */
        LINEAR_FC1,
        /** The second MLP linear (down_proj). */
        LINEAR_FC2;

        /** @return Megatron's name, e.g. {@code linear_qkv} */
        public String moduleName() {
            return name().toLowerCase(Locale.ROOT);
        }

        /**
         * @param name Megatron's module name, e.g. {@code linear_fc1}
         * @return the target
         * @throws IllegalArgumentException naming the accepted names
         */
        public static Target parse(String name) {
            for (Target t : values()) {
                if (t.moduleName().equals(name.trim())) {
                    return t;
                }
            }
            throw new IllegalArgumentException("LoRA target module '" + name + "' is not one of "
                    + Arrays.stream(values()).map(Target::moduleName).collect(Collectors.joining(", ")));
        }
    }

    /** Megatron Bridge's default targets: all four linears. */
    public static final Set<Target> ALL_LINEARS = Collections.unmodifiableSet(EnumSet.allOf(Target.class));

    /** Validates the values, naming the bad one. */
    public LoraConfig {
        if (dim < 1) {
            throw new IllegalArgumentException("--lora-dim " + dim + " must be at least 1");
        }
        if (!(alpha > 0) || Double.isInfinite(alpha)) {
            throw new IllegalArgumentException("--lora-alpha " + alpha + " must be a positive number");
        }
        if (!(dropout >= 0 && dropout < 1)) {
            throw new IllegalArgumentException("--lora-dropout " + dropout + " must be in [0, 1)");
        }
        if (targetModules == null || targetModules.isEmpty()) {
            throw new IllegalArgumentException("--lora-target-modules must name at least one linear");
        }
        targetModules = Collections.unmodifiableSet(EnumSet.copyOf(targetModules));
    }

    /**
     * @param names Megatron module names
     * @return the targets
     * @throws IllegalArgumentException for an unknown name
     */
    public static Set<Target> targets(List<String> names) {
        Set<Target> out = EnumSet.noneOf(Target.class);
        for (String n : names) {
            out.add(Target.parse(n));
        }
        return out;
    }

    /** @return {@code alpha / dim} */
    public double scaling() {
        return alpha / dim;
    }

    /**
     * @param target a linear
     * @return whether it gets an adapter
     */
    public boolean targets(Target target) {
        return targetModules.contains(target);
    }
}
