package io.mcore4j.samples.generate;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.checkpoint.DistCheckpointing;
import io.mcore4j.checkpoint.LoadResult;
import io.mcore4j.checkpoint.StrictMode;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.data.tokenizer.ByteLevelTokenizer;
import io.mcore4j.data.tokenizer.Tokenizer;
import io.mcore4j.hf.HfCheckpoint;
import io.mcore4j.hf.HfConfig;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.gpt.MultiTokenPrediction;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.pipeline.LayerAssignment;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;

import picocli.CommandLine.Option;

/**
 * The flags that name the model {@code generate-gpt} and {@code serve-gpt} load, as a picocli mixin: a pretrain-gpt
 * checkpoint ({@code --load}, its shape read from its tensors' shapes and the attention-head flags) or a Hugging
 * Face directory ({@code --load-hf}, its shape from {@code config.json}), and the tokenizer. {@link #check()}
 * validates the values, {@link #resolve(int)} reads the model's shape, {@link #build} builds this rank's chunk and
 * fills it with the weights.
 */
public final class ModelSource {
    @Option(names = "--load", paramLabel = "DIR",
            description = "a pretrain-gpt --save directory (its newest complete checkpoint) or one checkpoint directory")
    Path load;

    @Option(names = "--load-hf", paramLabel = "DIR",
            description = "a Hugging Face checkpoint (config.json + safetensors) instead of --load: the model's shape comes"
                    + " from config.json, so --num-attention-heads, --seq-length, --rotary-base and --norm-epsilon are not used")
    Path loadHf;

    @Option(names = "--num-attention-heads", defaultValue = "4", description = "attention heads of the model (default: ${DEFAULT-VALUE}, the README's main job)")
    int heads;

    @Option(names = "--seq-length", defaultValue = "2048",
            description = "max positions of a rotary model; a learned position table's size is read from the checkpoint (default: ${DEFAULT-VALUE})")
    int seqLength;

    @Option(names = "--rotary-base", defaultValue = "10000", description = "RoPE base of a rotary model (default: ${DEFAULT-VALUE})")
    double rotaryBase;

    @Option(names = "--norm-epsilon", defaultValue = "1e-5", description = "norm epsilon (default: ${DEFAULT-VALUE})")
    double normEpsilon;

    @Option(names = "--tokenizer-model", paramLabel = "PATH",
            description = "a Hugging Face tokenizer.json (or its directory), run by DJL's tokenizers, which must be on the class path;"
                    + " default: the byte-level tokenizer of pretrain-gpt's corpus")
    Path tokenizerModel;

    /** Megatron's default --make-vocab-size-divisible-by, the padding of a --load-hf model's vocabulary. */
    private static final int HF_VOCAB_DIVISOR = 128;

    /**
     * The model's shape and where its weights are. Owns the opened Hugging Face checkpoint: close it once the
     * model is built.
     *
     * @param config the model's configuration at the tensor-parallel size asked for
     * @param huggingFace the Hugging Face configuration, when the model has one (--load-hf, or a convert-hf checkpoint)
     * @param directory the checkpoint directory read
     * @param hfCheckpoint the --load-hf checkpoint, opened and checked once by {@link #resolve} and read by
     *     {@link #build} (its reads are positional: the ranks of one JVM may share it); null for --load
     */
    public record Resolved(TransformerConfig config, HfConfig huggingFace, Path directory, HfCheckpoint hfCheckpoint)
            implements AutoCloseable {
        /** @return how the model is named in a command's first line */
        String describe() {
            return directory + (huggingFace != null ? " (" + huggingFace.architecture().className() + ")" : "");
        }

        /** Closes the Hugging Face checkpoint's files, if one was opened. */
        @Override
        public void close() {
            if (hfCheckpoint != null) {
                hfCheckpoint.close();
            }
        }
    }

    /**
     * Checks the flags' values and paths before anything is loaded.
     *
     * @throws IllegalArgumentException naming the flag, its value and what was expected
     */
    void check() {
        if ((load == null) == (loadHf == null)) {
            throw new IllegalArgumentException(load == null ? "--load DIR or --load-hf DIR is required"
                    : "--load and --load-hf are alternatives; give one");
        }
        if (load != null && !Files.isDirectory(load)) {
            throw new IllegalArgumentException("--load " + load + (Files.exists(load) ? " is a file" : " does not exist")
                    + "; expected a pretrain-gpt --save directory or one checkpoint directory");
        }
        if (tokenizerModel != null && !Files.exists(tokenizerModel)) {
            throw new IllegalArgumentException("--tokenizer-model " + tokenizerModel + " does not exist; expected a tokenizer.json"
                    + " or its directory");
        }
        atLeast("--num-attention-heads", heads, 1);
        atLeast("--seq-length", seqLength, 1);
        if (!(rotaryBase > 0) || Double.isInfinite(rotaryBase)) {
            throw new IllegalArgumentException("--rotary-base " + rotaryBase + " must be a positive finite number");
        }
        if (!(normEpsilon > 0) || Double.isInfinite(normEpsilon)) {
            throw new IllegalArgumentException("--norm-epsilon " + normEpsilon + " must be a positive finite number");
        }
    }

    /**
     * Throws unless a flag's value reaches its least.
     *
     * @param flag the flag
     * @param value its value
     * @param least the least value allowed
     */
    static void atLeast(String flag, long value, long least) {
        if (value < least) {
            throw new IllegalArgumentException(flag + " " + value + " must be at least " + least);
        }
    }

    /**
     * Reads the model's shape: a Hugging Face model's vocabulary is padded as pretrain-gpt pads it by default
     * (128 x TP; padded ids are never picked).
     *
     * @param tensorParallel the tensor-parallel size the model will run at
     * @return the shape and the weights' directory (and, for --load-hf, the opened checkpoint); close it
     */
    Resolved resolve(int tensorParallel) {
        if (loadHf != null) {
            HfCheckpoint ck = HfCheckpoint.openInput("--load-hf", loadHf, Set.of()); // every tensor's header
            try {
                HfConfig hf = ck.config();
                return new Resolved(hf.transformerConfig(HF_VOCAB_DIVISOR, tensorParallel, DataType.FLOAT32), hf, loadHf, ck);
            } catch (RuntimeException e) {
                ck.close();
                throw e;
            }
        }
        CheckpointShapes checkpoint = CheckpointShapes.read(load);
        // convert-hf's checkpoints carry their Hugging Face config: it gives what no shape records (windows, norms' kind)
        HfConfig stored = checkpoint.storedHfConfig();
        TransformerConfig config = stored != null ? checkpoint.config(stored)
                : checkpoint.config(heads, seqLength, rotaryBase, normEpsilon);
        return new Resolved(config, stored, checkpoint.directory(), null);
    }

    /**
     * Builds this rank's chunk of the model and loads its weights (this rank's rows and columns only).
     *
     * @param model the resolved model (not closed yet)
     * @param groups this rank's groups
     * @param root the manager of the parameters (on the rank's device)
     * @param seed seed of the initial weights, which the checkpoint overwrites
     * @return the loaded chunk
     * @throws IllegalArgumentException if the checkpoint lacks weights the model needs or holds weights it has no place for
     */
    GptModel build(Resolved model, ProcessGroups groups, NDManager root, long seed) {
        int stage = groups.pipelineRank();
        int stages = groups.dims().pipelineParallel();
        int[] layers = LayerAssignment.even(model.config().numLayers(), stages, 1).layers(stage, 0);
        // the weights are overwritten by the checkpoint: draw the initial ones on the device, per rank
        ModelContext ctx = ModelContext.create(model.config(), groups, root, new SeedScheme(seed)).withDeviceInitialization();
        GptModel chunk = GptModel.build(ctx, LayerSpec.tensorParallel(), layers, stage == 0, stage == stages - 1);
        if (model.hfCheckpoint() != null) {
            model.hfCheckpoint().loadInto(List.of(chunk));
            return chunk;
        }
        Path source = model.directory();
        List<ShardedTensor> targets = chunk.shardedState("model.");
        LoadResult loaded = DistCheckpointing.load(source, targets, groups.world(), StrictMode.RETURN_ALL);
        if (!loaded.missingKeys().isEmpty()) {
            throw new IllegalArgumentException("checkpoint " + source + " lacks " + loaded.missingKeys());
        }
        // multi-token prediction's depths (mtp.layers.*) train only: generation leaves them unread
        List<String> unused = loaded.unexpectedKeys().stream().filter(k -> k.startsWith("model.")
                && !k.startsWith("model." + MultiTokenPrediction.KEY)).toList();
        if (!unused.isEmpty()) {
            // weights the model built from the shapes has no place for: generating without them would be wrong
            throw new IllegalArgumentException("checkpoint " + source + " holds model weights the model read from its"
                    + " shapes has no place for (" + unused.size() + ", e.g. " + unused.get(0) + "); a pretrain-gpt"
                    + " checkpoint of layer options no shape records cannot be generated from yet");
        }
        return chunk;
    }

    /**
     * @return the tokenizer {@code --tokenizer-model} names, or the byte-level one
     * @throws Exception if the tokenizer cannot be read
     */
    Tokenizer tokenizer() throws Exception {
        return tokenizerModel == null ? new ByteLevelTokenizer() : huggingFaceTokenizer(tokenizerModel);
    }

    /**
     * A Hugging Face tokenizer.
     *
     * @param path a tokenizer.json or its directory
     * @return the tokenizer
     * @throws Exception if it cannot be read
     */
    static io.mcore4j.data.preprocess.HuggingFaceTokenizerAdapter huggingFaceTokenizer(Path path) throws Exception {
        try {
            return io.mcore4j.data.preprocess.HuggingFaceTokenizerAdapter.load(path, null);
        } catch (NoClassDefFoundError e) {
            throw new IllegalArgumentException("--tokenizer-model needs DJL's ai.djl.huggingface:tokenizers on the class path", e);
        }
    }

    /**
     * The ids a token may take: the tokenizer's vocabulary, cut to the model's.
     *
     * @param tokenizer the tokenizer
     * @param model the resolved model
     * @return the vocabulary size
     */
    static int vocabulary(Tokenizer tokenizer, Resolved model) {
        return Math.min(tokenizer.vocabularySize(), model.huggingFace() == null ? model.config().vocabSize()
                : model.huggingFace().vocabSize());
    }

    /**
     * The end-of-document id that stops generation: the tokenizer's, unless the model cannot produce it (a
     * byte-level tokenizer's 256 for a small Hugging Face vocabulary), then none.
     *
     * @param tokenizer the tokenizer
     * @param vocabulary ids a token may take
     * @return the id, or -1
     */
    static int endOfDocument(Tokenizer tokenizer, int vocabulary) {
        return tokenizer.endOfDocument().isPresent() && tokenizer.endOfDocument().getAsInt() < vocabulary
                ? tokenizer.endOfDocument().getAsInt() : -1;
    }
}
