package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.models.TransformerConfig.RecomputeMethod;
import io.mcore4j.models.TransformerConfig.RecomputeModule;
import io.mcore4j.planner.Layout;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

import org.junit.jupiter.api.Test;

/**
 * Megatron's recompute flags on pretrain-gpt: {@code --recompute-method} and
 * {@code --recompute-num-layers} with full granularity, {@code --recompute-modules} with selective,
 * mapped onto the model; Megatron's refusals (and mcore4j's: unimplemented modules, flags that would
 * do nothing) exit with 2 and one line naming the flag; a planned layout's flags select it again.
 */
class PretrainGptRecomputeFlagsTest {

    private static TransformerConfig model(String... flags) {
        List<String> argv = new ArrayList<>(List.of("--mock-data", "--num-layers", "4"));
        argv.addAll(List.of(flags));
        return PretrainArgs.parse(argv.toArray(String[]::new)).setup().model();
    }

    @Test
    void flagsSelectMethodsAndModules() {
        TransformerConfig block = model("--recompute-granularity", "full", "--recompute-method", "block",
                "--recompute-num-layers", "3");
        assertEquals(Recompute.FULL, block.recompute());
        assertEquals(RecomputeMethod.BLOCK, block.recomputeMethod());
        assertEquals(3, block.recomputeNumLayers());
        TransformerConfig uniform = model("--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "2");
        assertEquals(RecomputeMethod.UNIFORM, uniform.recomputeMethod());
        assertEquals(2, uniform.recomputeNumLayers());
        assertEquals(Set.of(RecomputeModule.CORE_ATTN), model("--recompute-granularity", "selective").recomputeModules(),
                "Megatron's default module");
        assertEquals(Set.of(RecomputeModule.CORE_ATTN, RecomputeModule.MLP),
                model("--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mlp").recomputeModules());
        assertEquals(Set.of(RecomputeModule.MOE), model("--recompute-granularity", "selective", "--recompute-modules", "moe",
                "--num-experts", "4").recomputeModules());
        TransformerConfig none = model();
        assertEquals(Recompute.NONE, none.recompute());
        assertEquals(Set.of(), none.recomputeModules());
    }

    @Test
    void aPlannedLayoutsFlagsSelectItAgain() {
        Layout planned = new Layout(1, 2, 1, 1, 1, 1, 2, Recompute.FULL, false).withFullRecompute(RecomputeMethod.BLOCK, 1);
        String flags = planned.flags(4);
        assertTrue(flags.contains("--recompute-granularity full --recompute-method block --recompute-num-layers 1"), flags);
        List<String> argv = new ArrayList<>(List.of("--mock-data", "--num-layers", "4", "--nproc", "2",
                "--global-batch-size", "4"));
        argv.addAll(List.of(flags.split(" ")));
        assertEquals(planned, PlannerInputs.layout(PretrainArgs.parse(argv.toArray(String[]::new)), 2));
        PretrainArgs args = PretrainArgs.parse("--mock-data", "--num-layers", "4", "--recompute-granularity", "selective",
                "--recompute-modules", "mlp");
        PlannerInputs.apply(args, planned, 4);
        assertEquals(planned.recomputeMethod(), args.setup().model().recomputeMethod(), "--auto-layout writes the method back");
        assertEquals(Set.of(), args.setup().model().recomputeModules());
    }

    @Test
    void badRecomputeFlagsExitWithTwoAndOneLineNamingThem() {
        String[][] cases = {
            {"--recompute-granularity", "full"},
            {"--recompute-granularity", "full", "--recompute-method", "block"},
            {"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "0"},
            {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "5"},
            {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "3",
                "--pipeline-model-parallel-size", "2", "--nproc", "2"},
            {"--recompute-granularity", "selective", "--recompute-method", "uniform"},
            {"--recompute-num-layers", "2"},
            {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1",
                "--recompute-modules", "mlp"},
            {"--recompute-granularity", "selective", "--recompute-modules", "layernorm"},
            {"--recompute-granularity", "selective", "--recompute-modules", "core_attn", "frobnicate"},
            {"--recompute-granularity", "selective", "--recompute-modules", "moe"},
            {"--recompute-granularity", "selective", "--recompute-modules", "mlp", "--num-experts", "4"},
            {"--recompute-method", "diagonal"},
        };
        String[] expected = {
            "--recompute-granularity full needs --recompute-method uniform or block",
            "--recompute-granularity full needs --recompute-num-layers",
            "--recompute-num-layers 0 must be at least 1",
            "--recompute-num-layers 5 must be between 1 and the 4 layers of a pipeline stage",
            "--recompute-num-layers 3 must be between 1 and the 2 layers of a pipeline stage",
            "--recompute-method uniform applies only to --recompute-granularity full, got selective",
            "--recompute-num-layers 2 applies only to --recompute-granularity full, got none",
            "--recompute-modules mlp applies only to --recompute-granularity selective, got full",
            "--recompute-modules layernorm: recompute module layernorm is Megatron-Core's but not implemented in mcore4j",
            "--recompute-modules frobnicate: unknown recompute module frobnicate",
            "--recompute-modules moe recomputes mixture-of-experts layers, but there are none",
            "--recompute-modules mlp recomputes dense MLPs, but every layer is a mixture of experts",
            "--recompute-method': expected one of [uniform, block] (case-sensitive) but was 'diagonal'",
        };
        for (int i = 0; i < cases.length; i++) {
            List<String> argv = new ArrayList<>(List.of("--mock-data", "--num-layers", "4"));
            argv.addAll(List.of(cases[i]));
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            int code = PretrainGpt.execute("pretrain-gpt", argv.toArray(String[]::new),
                    new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8),
                    new PrintStream(err, true, StandardCharsets.UTF_8), (a, o) -> { throw new AssertionError("ran"); });
            String text = err.toString(StandardCharsets.UTF_8);
            assertEquals(2, code, String.join(" ", cases[i]) + ": " + text);
            String first = text.lines().findFirst().orElse("");
            assertTrue(first.startsWith("pretrain-gpt: ") && first.contains(expected[i]), String.join(" ", cases[i]) + " -> " + text);
            assertTrue(!text.contains("\tat "), "no stack trace: " + text);
        }
    }
}
