package io.mcore4j.samples.hf;

import io.mcore4j.checkpoint.DistCheckpointing;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.hf.HfCheckpoint;
import io.mcore4j.hf.HfConfig;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.samples.launch.FailureReport;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;

/**
 * {@code convert-hf}: imports a Hugging Face checkpoint directory into a GPT at the given layout
 * (each rank reading only its own shards) and saves the model weights as an mcore4j distributed
 * checkpoint under the key prefix {@code model.}, with the Hugging Face config in its common state
 * ({@code hf_config}) and the padded vocabulary ({@code padded_vocab_size}, which depends on the
 * tensor-parallel size) so that {@code export-hf} can write it back at any layout. Prints the import and save times.
 */
@Command(name = "convert-hf", mixinStandardHelpOptions = true,
        description = "Import a Hugging Face checkpoint (config.json + safetensors) at a parallel layout and save it "
                + "as an mcore4j distributed checkpoint.")
public final class ConvertHf implements Callable<Integer> {
    /** Key prefix of the model weights, as pretrain-gpt saves them. */
    static final String MODEL_PREFIX = "model.";

    @Option(names = "--load-hf", required = true, description = "Hugging Face checkpoint directory")
    Path hfDir;

    @Option(names = "--save", required = true, description = "output directory of the mcore4j checkpoint")
    Path save;

    @Option(names = "--ignore-config-key", description = "config.json key to ignore knowingly (repeatable)")
    List<String> ignoredKeys = new ArrayList<>();

    @Mixin
    HfLayout layout = new HfLayout();

    /** @param argv the flags; {@code --help} lists them */
    public static void main(String[] argv) {
        System.exit(commandLine().execute(argv));
    }

    /** @return the command, its failures reported in one line with exit 2 for bad input, 1 for a failed run */
    static CommandLine commandLine() {
        return new CommandLine(new ConvertHf()).setExecutionExceptionHandler(FailureReport.handler("convert-hf"));
    }

    @Override
    public Integer call() throws Exception {
        layout.checkRanks();
        HfConfig hf;
        try (HfCheckpoint ck = HfCheckpoint.openInput("--load-hf", hfDir, Set.copyOf(ignoredKeys))) {
            hf = ck.config();
        }
        TransformerConfig config = layout.modelConfig(hf, 0);
        String report = layout.run(config, (groups, manager, chunks) -> {
            long start = System.nanoTime();
            try (HfCheckpoint ck = HfCheckpoint.open(hfDir, Set.copyOf(ignoredKeys))) {
                ck.loadInto(chunks);
            }
            groups.world().barrier();
            double importSeconds = (System.nanoTime() - start) / 1e9;
            List<ShardedTensor> state = new ArrayList<>();
            for (GptModel chunk : chunks) {
                state.addAll(chunk.shardedState(MODEL_PREFIX));
            }
            Map<String, Object> common = new LinkedHashMap<>();
            common.putAll(hf.checkpointEntries(config.vocabSize()));
            common.put("hf_source", hfDir.toAbsolutePath().toString());
            common.put("layout", groups.dims().toString());
            long saveStart = System.nanoTime();
            DistCheckpointing.save(save, state, common, groups.world());
            double saveSeconds = (System.nanoTime() - saveStart) / 1e9;
            long parameters = chunks.stream().flatMap(c -> c.parameters().stream()).mapToLong(p -> p.data().size()).sum();
            return String.format(Locale.ROOT, "convert-hf: %s from %s at %s: imported in %.2f s (%d parameters on rank 0), "
                    + "saved to %s in %.2f s", hf.architecture().className(), hfDir, groups.dims(), importSeconds,
                    parameters, save, saveSeconds);
        });
        System.out.println(report);
        return 0;
    }
}
