package io.mcore4j.samples.pretrain;

import io.mcore4j.models.transformer.LoraConfig;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * The LoRA flags of {@code pretrain-gpt} (and so of the benchmark), as a picocli mixin. Named after
 * Megatron Bridge's {@code peft} option and the fields of its {@code LoRA} config ({@code dim},
 * {@code alpha}, {@code dropout}, {@code target_modules}, same defaults), with {@code --lora-rank}
 * accepted for PEFT's {@code r}. Validation raises {@link IllegalArgumentException} with one line
 * naming the flag.
 */
public final class LoraOptions {
    private static final int DEFAULT_DIM = 32;
    private static final double DEFAULT_ALPHA = 32;

    @Option(names = "--peft", paramLabel = "SCHEME", description = "Parameter-efficient fine-tuning: lora (adapters on the"
            + " layers' linears, every other weight frozen: no gradient, no optimizer state, --save writes the adapters"
            + " only) or none. Default: none.")
    String peft = "none";

    @Option(names = {"--lora-dim", "--lora-rank"}, paramLabel = "R", description = "With --peft lora: the adapters' rank"
            + " (Megatron Bridge's dim, PEFT's r). Default: " + DEFAULT_DIM + ".")
    Integer dim;

    @Option(names = "--lora-alpha", description = "With --peft lora: the adapters' output is scaled by alpha / dim."
            + " Default: " + (int) DEFAULT_ALPHA + ".")
    Double alpha;

    @Option(names = "--lora-dropout", description = "With --peft lora: dropout on the adapters' input. Default: 0.")
    Double dropout;

    @Option(names = "--lora-target-modules", arity = "1..*", split = ",", paramLabel = "MODULE",
            description = "With --peft lora: the linears that get adapters, among linear_qkv, linear_proj, linear_fc1,"
                    + " linear_fc2. Default: all four.")
    List<String> targetModules = new ArrayList<>();

    @Option(names = "--save-hf-adapter", description = "With --peft lora: after training, write the adapters alone in"
            + " Hugging Face PEFT's format (adapter_config.json + adapter_model.safetensors), which peft loads onto the"
            + " --load-hf model.")
    Path saveHfAdapter;

    /**
     * @return the LoRA settings, or null with {@code --peft none}
     * @throws IllegalArgumentException for an unknown scheme, a LoRA flag without {@code --peft lora}, or a
     *     bad value
     */
    public LoraConfig config() {
        switch (peft) {
            case "none" -> {
                String stray = dim != null ? "--lora-dim" : alpha != null ? "--lora-alpha" : dropout != null
                        ? "--lora-dropout" : !targetModules.isEmpty() ? "--lora-target-modules"
                        : saveHfAdapter != null ? "--save-hf-adapter" : null;
                if (stray != null) {
                    throw new IllegalArgumentException(stray + " needs --peft lora");
                }
                return null;
            }
            case "lora" -> {
                return new LoraConfig(dim != null ? dim : DEFAULT_DIM, alpha != null ? alpha : DEFAULT_ALPHA,
                        dropout != null ? dropout : 0, targetModules.isEmpty() ? LoraConfig.ALL_LINEARS
                        : LoraConfig.targets(targetModules));
            }
            default -> throw new IllegalArgumentException("--peft " + peft + " is not one of lora, none"
                    + (peft.equalsIgnoreCase("dora") ? " (mcore4j has no DoRA yet)" : ""));
        }
    }
}
