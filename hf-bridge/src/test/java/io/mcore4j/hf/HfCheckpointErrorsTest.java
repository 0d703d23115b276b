package io.mcore4j.hf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.models.TransformerConfig;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A damaged or unsupported checkpoint is refused at {@link HfCheckpoint#open}, before any tensor is
 * read, with a message naming the file and the tensor or config key.
 */
class HfCheckpointErrorsTest {
    @TempDir
    Path tmp;

    private Path copy(String fixture) throws IOException {
        Path src = Fixtures.dir(fixture);
        Path dst = tmp.resolve(fixture);
        Files.createDirectories(dst);
        try (Stream<Path> files = Files.list(src)) {
            for (Path f : (Iterable<Path>) files::iterator) {
                Files.copy(f, dst.resolve(f.getFileName()));
            }
        }
        return dst;
    }

    private static void editConfig(Path dir, String from, String to) throws IOException {
        Path config = dir.resolve("config.json");
        String text = Files.readString(config, StandardCharsets.UTF_8);
        assertTrue(text.contains(from), "fixture config lacks " + from);
        Files.writeString(config, text.replace(from, to), StandardCharsets.UTF_8);
    }

    private static String refused(Path dir) {
        return assertThrows(HfCheckpointException.class, () -> HfCheckpoint.open(dir).close()).getMessage();
    }

    private static void mentions(String message, String... parts) {
        for (String p : parts) {
            assertTrue(message.contains(p), "\"" + message + "\" does not mention " + p);
        }
    }

    @Test
    void missingShardNamesTheFileAndATensorItHolds() throws IOException {
        Path dir = copy("mistral");
        Files.delete(dir.resolve("model-00002-of-00003.safetensors"));
        mentions(refused(dir), "model-00002-of-00003.safetensors", "is missing", "model.layers.");
    }

    @Test
    void shapeThatDoesNotMatchTheConfigNamesFileTensorAndShapes() throws IOException {
        Path dir = copy("llama");
        editConfig(dir, "\"intermediate_size\": 64", "\"intermediate_size\": 48");
        mentions(refused(dir), "model.safetensors", "model.layers.0.mlp.gate_proj.weight", "[64, 32]", "[48, 32]");
    }

    @Test
    void unknownArchitectureIsNamed() throws IOException {
        Path dir = copy("llama");
        editConfig(dir, "LlamaForCausalLM", "FalconForCausalLM");
        mentions(refused(dir), "config.json", "FalconForCausalLM", "LlamaForCausalLM");
    }

    @Test
    void unknownConfigKeyIsNamedUnlessIgnoredExplicitly() throws IOException {
        Path dir = copy("qwen2");
        editConfig(dir, "\"hidden_act\"", "\"attn_logit_softcapping\": 30.0,\n  \"hidden_act\"");
        mentions(refused(dir), "config.json", "attn_logit_softcapping");
        HfCheckpoint.open(dir, java.util.Set.of("attn_logit_softcapping")).close();
    }

    @Test
    void mixtralSlidingWindowIsRefused() throws IOException {
        Path dir = copy("mixtral");
        editConfig(dir, "\"sliding_window\": null", "\"sliding_window\": 16");
        mentions(refused(dir), "config.json", "\"sliding_window\" = 16", "Mixtral");
    }

    /** Qwen3's window applies with use_sliding_window to the layers layer_types calls sliding, as HF_WINDOW - 1. */
    @Test
    void qwen3SlidingWindowFollowsLayerTypes() throws IOException {
        Path dir = copy("qwen3");
        editConfig(dir, "\"sliding_window\": null", "\"sliding_window\": 64");
        try (HfCheckpoint ck = HfCheckpoint.open(dir)) {
            assertTrue(ck.config().transformerConfig().slidingWindow() == null, "a window without use_sliding_window");
        }
        editConfig(dir, "\"use_sliding_window\": false", "\"use_sliding_window\": true");
        editConfig(dir, "\"full_attention\"\n  ]", "\"sliding_attention\"\n  ]");
        try (HfCheckpoint ck = HfCheckpoint.open(dir)) {
            TransformerConfig c = ck.config().transformerConfig();
            assertEquals(-1, c.windowSize(0));
            assertEquals(63, c.windowSize(1));
        }
        editConfig(dir, "\"sliding_attention\"\n  ]", "\"chunked_attention\"\n  ]");
        mentions(refused(dir), "config.json", "layer_types", "chunked_attention");
    }

    /** Gemma 3's options mcore4j does not implement are named: logit soft-capping, yarn rope scaling. */
    @Test
    void gemma3SoftCappingAndYarnRopeAreRefused() throws IOException {
        Path dir = copy("gemma3");
        refusedWhileEdited(dir, "\"final_logit_softcapping\": null", "\"final_logit_softcapping\": 30.0", "config.json",
                "\"final_logit_softcapping\" = 30.0", "not supported");
        refusedWhileEdited(dir, "\"attn_logit_softcapping\": null", "\"attn_logit_softcapping\": 50.0",
                "\"attn_logit_softcapping\" = 50.0");
        refusedWhileEdited(dir, "\"rope_type\": \"linear\"", "\"rope_type\": \"yarn\"", "rope_parameters.full_attention", "yarn");
        HfCheckpoint.open(dir).close(); // every edit undone
    }

    /** The checkpoint with {@code from} replaced by {@code to} is refused naming {@code parts}; then the edit is undone. */
    private static void refusedWhileEdited(Path dir, String from, String to, String... parts) throws IOException {
        editConfig(dir, from, to);
        mentions(refused(dir), parts);
        editConfig(dir, to, from);
    }

    @Test
    void qwen3AttentionBiasIsRefused() throws IOException {
        Path dir = copy("qwen3");
        editConfig(dir, "\"attention_bias\": false", "\"attention_bias\": true");
        mentions(refused(dir), "config.json", "\"attention_bias\" = true", "o_proj");
    }

    @Test
    void unsupportedRopeScalingIsRefused() throws IOException {
        Path dir = copy("llama");
        editConfig(dir, "\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\"");
        mentions(refused(dir), "rope_parameters", "yarn");
    }

    @Test
    void leftOverTensorIsNamed() throws IOException {
        Path dir = copy("llama");
        editConfig(dir, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
        mentions(refused(dir), "model.safetensors", "model.layers.1.", "is not part of a LlamaForCausalLM");
    }
}
