package io.mcore4j.samples.hf;

import io.mcore4j.checkpoint.CheckpointManager;
import io.mcore4j.checkpoint.CommonState;
import io.mcore4j.checkpoint.DistCheckpointing;
import io.mcore4j.checkpoint.LoadResult;
import io.mcore4j.checkpoint.StrictMode;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.hf.HfConfig;
import io.mcore4j.hf.HfDtype;
import io.mcore4j.hf.HfExport;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.gpt.MultiTokenPrediction;
import io.mcore4j.samples.launch.FailureReport;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.Callable;

/**
 * {@code export-hf}: loads the model weights (key prefix {@code model.}) of an mcore4j distributed
 * checkpoint, saved at any layout, into a GPT at the given layout and writes them as a Hugging Face
 * directory that {@code transformers} loads with {@code from_pretrained}. The Hugging Face config is
 * the one {@code convert-hf} stored in the checkpoint, or {@code --hf-config DIR}'s
 * {@code config.json}; tokenizer files can be copied along. Prints the load and export times.
 */
@Command(name = "export-hf", mixinStandardHelpOptions = true,
        description = "Write the model weights of an mcore4j checkpoint (any layout) as a Hugging Face directory.")
public final class ExportHf implements Callable<Integer> {
    @Option(names = "--load", required = true,
            description = "mcore4j checkpoint: a checkpoint directory, or a pretrain-gpt --save root (its latest iteration)")
    Path load;

    @Option(names = "--save-hf", required = true, description = "output Hugging Face directory")
    Path saveHf;

    @Option(names = "--hf-config", description = "directory whose config.json describes the model (default: the one convert-hf stored)")
    Path hfConfigDir;

    @Option(names = "--tokenizer-from", description = "copy tokenizer and generation files from this directory")
    Path tokenizerFrom;

    /** The {@code --dtype} values and the safetensors dtype each writes. */
    public enum DtypeFlag {
        bf16(HfDtype.BF16), f16(HfDtype.F16), f32(HfDtype.F32);

        private final HfDtype dtype;

        DtypeFlag(HfDtype dtype) {
            this.dtype = dtype;
        }
    }

    @Option(names = "--dtype", description = "${COMPLETION-CANDIDATES} (default: ${DEFAULT-VALUE})")
    DtypeFlag dtype = DtypeFlag.bf16;

    @Option(names = "--max-shard-bytes", description = "largest safetensors file (default: ${DEFAULT-VALUE})")
    long maxShardBytes = HfExport.DEFAULT_MAX_SHARD_BYTES;

    @Option(names = "--padded-vocab-size", description = "the checkpoint's padded vocabulary (default: the one convert-hf "
            + "stored, else the vocabulary padded to --make-vocab-size-divisible-by x TP as at save time)")
    int paddedVocab;

    @Mixin
    HfLayout layout = new HfLayout();

    /** @param argv the flags; {@code --help} lists them */
    public static void main(String[] argv) {
        System.exit(commandLine().execute(argv));
    }

    /** @return the command, its failures reported in one line with exit 2 for bad input, 1 for a failed run */
    static CommandLine commandLine() {
        return new CommandLine(new ExportHf()).setExecutionExceptionHandler(FailureReport.handler("export-hf"));
    }

    @Override
    public Integer call() throws Exception {
        layout.checkRanks();
        if (!Files.isDirectory(load)) {
            throw new IllegalArgumentException("--load " + load + (Files.exists(load) ? " is a file" : " does not exist")
                    + "; expected a convert-hf or pretrain-gpt checkpoint directory");
        }
        HfConfig given = hfConfigDir == null ? null : HfConfig.readInput("--hf-config", hfConfigDir, Set.of());
        if (tokenizerFrom != null && !Files.isDirectory(tokenizerFrom)) {
            throw new IllegalArgumentException("--tokenizer-from " + tokenizerFrom + " is not a directory");
        }
        if (maxShardBytes < 1 || paddedVocab < 0) {
            throw new IllegalArgumentException(maxShardBytes < 1 ? "--max-shard-bytes " + maxShardBytes + " must be at least 1"
                    : "--padded-vocab-size " + paddedVocab + " must not be negative");
        }
        HfDtype type = dtype.dtype;
        Path checkpoint = new CheckpointManager(load, 1).latest().orElse(load);
        if (!DistCheckpointing.isComplete(checkpoint)) {
            throw new IllegalArgumentException("--load " + load + " holds no complete checkpoint (no mcore4j_metadata.json"
                    + (checkpoint.equals(load) ? "" : " in " + checkpoint) + "); expected a convert-hf or pretrain-gpt --save directory");
        }
        CommonState common = DistCheckpointing.loadCommonState(checkpoint);
        int padded = paddedVocab > 0 ? paddedVocab
                : common.contains(HfConfig.PADDED_VOCAB_KEY) ? common.getInt(HfConfig.PADDED_VOCAB_KEY) : 0;
        HfConfig hf = given != null ? given : HfConfig.recordedIn(checkpoint, common);
        if (hf == null) {
            throw new IllegalArgumentException("--load " + checkpoint + " holds no " + HfConfig.CHECKPOINT_KEY
                    + " (written by convert-hf, and by pretrain-gpt for a model a Hugging Face architecture describes): pass --hf-config DIR");
        }
        TransformerConfig config = withStoredDepths(layout.modelConfig(hf, padded), hf, checkpoint);
        String report = layout.run(config, (groups, manager, chunks) -> {
            long start = System.nanoTime();
            List<ShardedTensor> targets = new ArrayList<>();
            for (GptModel chunk : chunks) {
                targets.addAll(chunk.shardedState(ConvertHf.MODEL_PREFIX));
            }
            // optimizer state and other keys of a training checkpoint are not needed here
            LoadResult loaded = DistCheckpointing.load(checkpoint, targets, groups.world(), StrictMode.RAISE_MISSING);
            // multi-token prediction's depths train only: an architecture without a place for them exports without them
            List<String> dropped = loaded.unexpectedKeys().stream().filter(k -> k.startsWith(ConvertHf.MODEL_PREFIX)
                    && !k.startsWith(ConvertHf.MODEL_PREFIX + MultiTokenPrediction.KEY)).toList();
            if (!dropped.isEmpty()) {
                // a model weight with no place in the architecture would be left out of the export without a word
                throw new IllegalArgumentException(checkpoint + " holds model weights that " + hf.architecture().className()
                        + " has no place for (" + dropped.size() + ", e.g. " + dropped.get(0) + "; a --qk-layernorm model's"
                        + " query and key norms are such weights): exporting would drop them");
            }
            double loadSeconds = (System.nanoTime() - start) / 1e9;
            long exportStart = System.nanoTime();
            HfExport.write(saveHf, hf, chunks, groups.world(), type, maxShardBytes);
            double exportSeconds = (System.nanoTime() - exportStart) / 1e9;
            return String.format(Locale.ROOT, "export-hf: %s at %s: loaded %s in %.2f s (%d keys not needed), "
                    + "exported %s to %s in %.2f s", hf.architecture().className(), groups.dims(), checkpoint, loadSeconds,
                    loaded.unexpectedKeys().size(), type, saveHf, exportSeconds);
        });
        if (tokenizerFrom != null) {
            HfExport.copyTokenizerFiles(tokenizerFrom, saveHf);
        }
        System.out.println(report);
        return 0;
    }
    /**
     * The model with the multi-token prediction depths the checkpoint stores ({@code mtp.layers.<k>.*}) where the
     * architecture has a place for them (DeepSeek-V3's layers after the decoder's, as many as its
     * {@code num_nextn_predict_layers}); the config as it is otherwise.
     */
    private static TransformerConfig withStoredDepths(TransformerConfig config, HfConfig hf, Path checkpoint) {
        String prefix = ConvertHf.MODEL_PREFIX + MultiTokenPrediction.KEY;
        int depths = (int) DistCheckpointing.storedTensors(checkpoint).keySet().stream().filter(k -> k.startsWith(prefix))
                .map(k -> k.substring(prefix.length(), k.indexOf('.', prefix.length()))).distinct().count();
        if (depths == 0 || hf.multiTokenPredictionLayers() < depths) {
            return config;
        }
        return config.toBuilder().mtp(new TransformerConfig.MtpSettings(depths,
                TransformerConfig.MtpSettings.DEFAULT_LOSS_SCALING_FACTOR)).build();
    }
}
