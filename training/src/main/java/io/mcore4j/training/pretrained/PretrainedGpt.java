package io.mcore4j.training.pretrained;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.checkpoint.CheckpointManager;
import io.mcore4j.checkpoint.DistCheckpointing;
import io.mcore4j.checkpoint.LoadResult;
import io.mcore4j.checkpoint.StoredTensorInfo;
import io.mcore4j.checkpoint.StrictMode;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.Precision;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.hf.HfCheckpoint;
import io.mcore4j.hf.HfConfig;
import io.mcore4j.hf.HfDtype;
import io.mcore4j.hf.HfExport;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.tensorparallel.LoraLinear;
import io.mcore4j.training.CheckpointConfig;
import io.mcore4j.training.TrainStep;
import io.mcore4j.training.TrainingConfig;
import io.mcore4j.training.TrainingLoop;
import io.mcore4j.training.gpt.GptBatches;
import io.mcore4j.training.gpt.GptTrainingModel;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * A pretrained GPT as this rank holds it: its model chunks at the layout of the {@link ProcessGroups}
 * it was loaded with (one chunk per virtual pipeline stage), filled from a Hugging Face directory or
 * an mcore4j checkpoint; the logits of a batch of token ids; fine-tuning through the same
 * {@link TrainStep} and {@link TrainingLoop} as {@code pretrain-gpt}; and saving back in either form.
 *
 * <p>Every method communicates (over the tensor-, pipeline- and data-parallel groups, or the world), so
 * every rank of the world calls it together with the same arguments; the results are the same on every
 * rank. Ranks may be threads of one JVM ({@code InJvmWorld}), processes over TCP, or one process per
 * GPU. An instance owns its parameters, in a child of the manager it was loaded with, until
 * {@link #close()}, and is used by one thread.
 */
public final class PretrainedGpt implements AutoCloseable {
    private final GptTrainingModel model;
    private final NDManager parameters;
    private final NDManager manager;
    private final ProcessGroups groups;
    private final HfConfig hf;
    private final LoadOptions options;
    private boolean closed;

    private PretrainedGpt(GptTrainingModel model, NDManager parameters, NDManager manager, ProcessGroups groups, HfConfig hf,
                          LoadOptions options) {
        this.model = model;
        this.parameters = parameters;
        this.manager = manager;
        this.groups = groups;
        this.hf = hf;
        this.options = options;
    }

    /**
     * Loads a Hugging Face directory with {@link LoadOptions#DEFAULTS}.
     *
     * @see #fromHuggingFace(Path, ProcessGroups, NDManager, LoadOptions)
     */
    public static PretrainedGpt fromHuggingFace(Path dir, ProcessGroups groups, NDManager manager) {
        return fromHuggingFace(dir, groups, manager, LoadOptions.DEFAULTS);
    }

    /**
     * Builds this rank's chunks from {@code dir/config.json} at the layout of {@code groups} and reads
     * only this rank's rows and columns of the weights ({@link HfCheckpoint#loadInto}).
     *
     * @param dir a Hugging Face directory: {@code config.json} and safetensors files of an architecture
     *            that {@link HfConfig} maps (LLaMA, Qwen2, Qwen3, Mistral, Mixtral, GPT-2)
     * @param groups this rank's groups; their dims are the layout
     * @param manager this rank's root manager, on its device; the parameters live in a child of it
     * @param options dtype, vocabulary padding, LoRA, seed
     * @return this rank's model; close it
     * @throws IllegalArgumentException naming the directory and what is wrong with it (missing, an
     *         unsupported architecture or config key, a tensor that is missing or of another shape), or the
     *         layout the model does not fit
     */
    public static PretrainedGpt fromHuggingFace(Path dir, ProcessGroups groups, NDManager manager, LoadOptions options) {
        Objects.requireNonNull(dir, "dir");
        try (HfCheckpoint ck = HfCheckpoint.openInput("Hugging Face directory", dir, Set.of())) {
            HfConfig config = ck.config();
            PretrainedGpt out = build(config.transformerConfig(options.vocabDivisor(), groups.dims().tensorParallel(),
                    options.dtype()), config, groups, manager, options);
            try {
                ck.loadInto(out.chunks());
            } catch (RuntimeException e) {
                out.close();
                throw e;
            }
            return out;
        }
    }

    /**
     * Loads an mcore4j checkpoint that records its Hugging Face config ({@link #saveCheckpoint},
     * {@code convert-hf}) with {@link LoadOptions#DEFAULTS}.
     *
     * @see #fromCheckpoint(Path, HfConfig, ProcessGroups, NDManager, LoadOptions)
     */
    public static PretrainedGpt fromCheckpoint(Path dir, ProcessGroups groups, NDManager manager) {
        return fromCheckpoint(dir, null, groups, manager, LoadOptions.DEFAULTS);
    }

    /**
     * Builds this rank's chunks at the layout of {@code groups} and loads the model weights (keys
     * {@code model.*}) of an mcore4j distributed checkpoint saved at any layout, resharding them. The
     * padded vocabulary is the checkpoint's own.
     *
     * @param dir a checkpoint directory, or a {@code pretrain-gpt --save} root (its latest checkpoint)
     * @param config the model's Hugging Face config, or null to take the one the checkpoint records
     *               ({@link #saveCheckpoint} and {@code convert-hf} record it; for a {@code pretrain-gpt}
     *               checkpoint pass {@link HfConfig#forModel} of its model, or {@link HfConfig#read} of the
     *               directory it was imported from)
     * @param groups this rank's groups; their dims are the layout
     * @param manager this rank's root manager, on its device
     * @param options dtype, LoRA (a checkpoint saved with adapters needs the same settings), seed
     * @return this rank's model; close it
     * @throws IllegalArgumentException naming the directory if it holds no complete checkpoint, no
     *         config, or weights that do not fit the model
     */
    public static PretrainedGpt fromCheckpoint(Path dir, HfConfig config, ProcessGroups groups, NDManager manager,
                                               LoadOptions options) {
        Objects.requireNonNull(dir, "dir");
        Path checkpoint = Files.isDirectory(dir) ? new CheckpointManager(dir, 1).latest().orElse(dir) : dir;
        if (!DistCheckpointing.isComplete(checkpoint)) {
            throw new IllegalArgumentException("checkpoint directory " + dir + (Files.exists(dir)
                    ? " holds no complete checkpoint (no mcore4j_metadata.json)" : " does not exist")
                    + "; expected a directory PretrainedGpt.saveCheckpoint, convert-hf or pretrain-gpt --save wrote");
        }
        HfConfig hfConfig = config != null ? config : recordedConfig(checkpoint);
        int padded = storedVocabulary(checkpoint);
        int tp = groups.dims().tensorParallel();
        if (padded < hfConfig.vocabSize() || padded % tp != 0) {
            throw new IllegalArgumentException("checkpoint " + checkpoint + " has " + padded + " vocabulary rows; expected"
                    + " at least the model's vocab_size " + hfConfig.vocabSize() + ", and a multiple of the tensor-parallel"
                    + " size " + tp);
        }
        PretrainedGpt out = build(hfConfig.transformerConfigPaddedTo(padded, options.dtype()), hfConfig, groups, manager,
                options);
        try {
            out.loadWeights(checkpoint);
            return out;
        } catch (RuntimeException e) {
            out.close();
            throw e;
        }
    }

    private static HfConfig recordedConfig(Path checkpoint) {
        HfConfig recorded = HfConfig.recordedIn(checkpoint, DistCheckpointing.loadCommonState(checkpoint));
        if (recorded == null) {
            throw new IllegalArgumentException("checkpoint " + checkpoint + " records no " + HfConfig.CHECKPOINT_KEY
                    + " (pretrain-gpt's do not); expected one written by PretrainedGpt.saveCheckpoint or convert-hf,"
                    + " or pass the model's HfConfig");
        }
        return recorded;
    }

    /** The padded vocabulary the checkpoint was saved with: its embedding's (or output layer's) rows. */
    private static int storedVocabulary(Path checkpoint) {
        Map<String, StoredTensorInfo> stored = DistCheckpointing.storedTensors(checkpoint);
        for (String key : List.of("embedding.word_embeddings.weight", "output_layer.weight")) {
            StoredTensorInfo t = stored.get(TrainStep.MODEL_PREFIX + key);
            if (t != null) {
                return Math.toIntExact(t.shape()[0]);
            }
        }
        throw new IllegalArgumentException("checkpoint " + checkpoint + " holds no " + TrainStep.MODEL_PREFIX
                + "embedding.word_embeddings.weight; expected a GPT's model weights");
    }

    private static PretrainedGpt build(TransformerConfig config, HfConfig hf, ProcessGroups groups, NDManager manager,
                                       LoadOptions options) {
        Objects.requireNonNull(groups, "groups");
        Objects.requireNonNull(manager, "manager");
        Objects.requireNonNull(options, "options");
        ParallelDims dims = groups.dims();
        int vp = dims.virtualPipelineParallel();
        config.validate(dims, vp > 1 ? config.numLayers() / (dims.pipelineParallel() * vp) : 0);
        if (options.lora() != null && config.moe() != null) {
            throw new IllegalArgumentException("LoRA adapters wrap the dense layers' linears; " + hf.architecture().className()
                    + " has mixture-of-experts layers (expert adapters are not supported)");
        }
        LayerSpec spec = options.lora() == null ? LayerSpec.tensorParallel() : LayerSpec.tensorParallel().withLora(options.lora());
        NDManager parameters = manager.newSubManager();
        try {
            ModelContext ctx = ModelContext.create(config, groups, parameters, new SeedScheme(options.seed()));
            if (options.lora() == null && manager.getDevice().isGpu()) {
                ctx = ctx.withDeviceInitialization(); // every weight is overwritten: draw the placeholders on the device
            }
            return new PretrainedGpt(GptTrainingModel.build(ctx, spec, vp), parameters, manager, groups, hf, options);
        } catch (RuntimeException e) {
            parameters.close();
            throw e;
        }
    }

    private void loadWeights(Path checkpoint) {
        List<ShardedTensor> targets = modelState();
        LoadResult loaded = DistCheckpointing.load(checkpoint, targets, groups.world(), StrictMode.RETURN_ALL);
        // adapters a checkpoint lacks keep their initialisation (B = 0: the base model's function)
        List<String> missing = loaded.missingKeys().stream().filter(k -> !LoraLinear.isAdapterKey(k)).toList();
        List<String> extra = loaded.unexpectedKeys().stream().filter(k -> k.startsWith(TrainStep.MODEL_PREFIX)).toList();
        if (!missing.isEmpty() || !extra.isEmpty()) {
            throw new IllegalArgumentException("checkpoint " + checkpoint + (missing.isEmpty() ? "" : " lacks " + missing.size()
                    + " model weights this model needs (e.g. " + missing.get(0) + ")") + (extra.isEmpty() ? ""
                    : (missing.isEmpty() ? "" : " and") + " holds " + extra.size() + " model weights it has no place for (e.g. "
                    + extra.get(0) + ")") + "; expected the model it was saved from (LoadOptions.lora as at save time)");
        }
    }

    private List<ShardedTensor> modelState() {
        List<ShardedTensor> out = new ArrayList<>();
        for (GptModel chunk : chunks()) {
            out.addAll(chunk.shardedState(TrainStep.MODEL_PREFIX));
        }
        return out;
    }

    /** @return this rank's chunks, in virtual-stage order (the first holds the embedding on the first stage) */
    public List<GptModel> chunks() {
        requireOpen();
        return model.chunks();
    }

    /** @return the model's configuration: its shapes, dtype and padded vocabulary */
    public TransformerConfig config() {
        return model.config();
    }

    /** @return the Hugging Face config the model maps to (its architecture and {@code config.json}) */
    public HfConfig hfConfig() {
        return hf;
    }

    /** @return the vocabulary without padding: token ids are below it, and logits have this many columns */
    public int vocabSize() {
        return hf.vocabSize();
    }

    /** @return this rank's groups */
    public ProcessGroups groups() {
        return groups;
    }

    /**
     * The model's next-token logits for each position of each sequence, without gradients: the
     * vocabulary columns gathered over the tensor-parallel group, the padding columns cut, the result
     * sent from the last pipeline stage to the others.
     *
     * @param tokens {@code [batch][sequence]} token ids in {@code [0, vocabSize())}, every row equally long,
     *               at most the model's positions long
     * @return {@code [batch][sequence][vocabSize()]} float32 logits, the same on every rank
     * @throws IllegalArgumentException naming the row, position or value that is wrong, or the
     *         context-parallel size (logits need whole sequences on every rank)
     */
    public float[][][] logits(int[][] tokens) {
        requireOpen();
        int positions = config().maxSequenceLength();
        int seq = TokenChecks.rows("sequence", tokens, 1, positions, "the model's positions", vocabSize());
        if (groups.dims().contextParallel() > 1) {
            throw new IllegalArgumentException("logits need whole sequences on every rank; these groups have context-parallel"
                    + " size " + groups.dims().contextParallel() + ", expected 1");
        }
        return new StageForward(model.chunks(), groups, config()).logits(manager, tokens, seq, vocabSize());
    }

    /**
     * Fine-tunes the model on {@code samples}: {@link FineTuning#iterations()} steps of the
     * {@link TrainStep}, each reading {@link FineTuning#globalBatchSize()} samples in order (wrapping
     * around), this rank's data-parallel share of them. With {@link LoadOptions#lora()} the base weights
     * are frozen and only the adapters train. Each call starts a fresh optimizer state from the
     * model's current weights. The logging rank prints one line per {@link FineTuning#logInterval()}.
     *
     * @param samples {@code [n][seqLength + 1]} token ids: the model reads each row's first {@code seqLength}
     *                and learns to predict its last; every row equally long; {@code n} a multiple of
     *                the micro-batch size times the data-parallel size
     * @param tuning iterations, learning rate, batch sizes, optimizer
     * @return the loss of each iteration, the same list on every rank
     * @throws IllegalArgumentException naming the sample, position or value that is wrong, or batch
     *         sizes that do not divide
     */
    public List<Double> fineTune(int[][] samples, FineTuning tuning) {
        requireOpen();
        Objects.requireNonNull(tuning, "tuning");
        int positions = config().maxSequenceLength();
        int seq = TokenChecks.rows("sample", samples, 2, positions + 1, "the model's " + positions
                + " positions of input and the label after them", vocabSize()) - 1;
        int perRead = tuning.microBatchSize() * groups.dims().dataParallel();
        if (samples.length % perRead != 0) {
            throw new IllegalArgumentException(samples.length + " samples are not a multiple of the micro-batch size "
                    + tuning.microBatchSize() + " x data-parallel size " + groups.dims().dataParallel() + " = " + perRead
                    + " (every read takes whole micro-batches)");
        }
        DataType dtype = config().dtype();
        Precision precision = Precision.of(dtype == DataType.FLOAT16, dtype == DataType.BFLOAT16);
        Precision asked = tuning.optimizer().precision();
        if (asked != Precision.FP32 && asked != precision) {
            throw new IllegalArgumentException("optimizer precision " + asked + " does not match the model's " + dtype.name()
                    + " parameters; expected " + precision + " or FP32 (fine-tuning follows LoadOptions.dtype)");
        }
        OptimizerConfig optimizer = tuning.optimizer().toBuilder().precision(precision).build();
        if (options.lora() != null) {
            model.freezeBaseWeights(); // before the step: its optimizer and gradient buffers see only the adapters
        }
        GptBatches batches = new GptBatches(new TokenSamples(samples), tuning.microBatchSize(), groups.dataParallelRank(),
                groups.dims().dataParallel(), ContextParallelSplit.of(groups.cp()));
        TrainingConfig loop = new TrainingConfig(tuning.iterations(), tuning.lrSchedule(), optimizer.weightDecay(),
                tuning.logInterval(), 0, 0, CheckpointConfig.NONE, options.seed());
        List<Double> losses;
        try (TrainStep step = TrainStep.builder(model, groups, manager).optimizer(optimizer)
                .microBatchSize(tuning.microBatchSize()).seqLength(seq).globalBatchSize(tuning.globalBatchSize()).build()) {
            losses = TrainingLoop.builder(step, loop, batches).out(tuning.log()).build().run().losses();
        }
        return fromLoggingRank(losses);
    }

    /** The logging rank's losses on every rank (the others' lists are empty). */
    private List<Double> fromLoggingRank(List<Double> losses) {
        ByteBuffer mine = ByteBuffer.allocate(Double.BYTES * losses.size());
        losses.forEach(mine::putDouble);
        for (byte[] bytes : groups.world().allGatherBytes(mine.array())) {
            if (bytes.length > 0) {
                ByteBuffer b = ByteBuffer.wrap(bytes);
                List<Double> out = new ArrayList<>();
                while (b.hasRemaining()) {
                    out.add(b.getDouble());
                }
                return List.copyOf(out);
            }
        }
        return List.of();
    }

    /**
     * Saves the model weights as an mcore4j distributed checkpoint (keys {@code model.*}, LoRA adapters
     * included) with the Hugging Face config and the padded vocabulary, which {@link #fromCheckpoint}
     * and {@code export-hf} read back at any layout.
     *
     * @param dir the checkpoint directory (created)
     */
    public void saveCheckpoint(Path dir) {
        requireOpen();
        Map<String, Object> common = new LinkedHashMap<>();
        common.putAll(hf.checkpointEntries(config().vocabSize()));
        common.put("layout", groups.dims().toString());
        DistCheckpointing.save(dir, modelState(), common, groups.world());
    }

    /**
     * Writes the model as a Hugging Face directory that {@code transformers} loads with
     * {@code from_pretrained}. LoRA adapters are merged into the base weights first
     * ({@link LoraLinear#merge}: the model computes the same function afterwards, its adapters zero).
     *
     * @param dir the output directory (created; model files in it are replaced)
     * @param dtype the dtype of the written tensors
     */
    public void saveHuggingFace(Path dir, HfDtype dtype) {
        requireOpen();
        HfExport.write(dir, hf, model.chunks(), groups.world(), dtype);
    }

    private void requireOpen() {
        if (closed) {
            throw new IllegalStateException("this PretrainedGpt is closed");
        }
    }

    /** Releases the parameters (and every gradient and adapter); later calls fail. */
    @Override
    public void close() {
        if (!closed) {
            closed = true;
            try {
                model.close();
            } finally {
                parameters.close();
            }
        }
    }
}
