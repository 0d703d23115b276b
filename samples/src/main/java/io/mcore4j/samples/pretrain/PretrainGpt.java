package io.mcore4j.samples.pretrain;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.data.gpt.GptDatasetBuilder;
import io.mcore4j.data.gpt.GptSplits;
import io.mcore4j.data.gpt.SampleDataset;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.parallel.launch.LaunchEnvironment;
import io.mcore4j.samples.launch.LaunchedRank;

import java.io.PrintStream;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

/**
 * {@code pretrain-gpt}: trains a GPT with Megatron-LM-style flags.
 *
 * <p>Ranks: with {@code --nproc N} (and no launcher variables) N threads of this JVM are the ranks,
 * on CPU. Under torchrun ({@code torchrun --no-python java ...}), srun or mpirun, each process is one
 * rank: on its GPU over NCCL when CUDA devices are visible, otherwise on the CPU over TCP, meeting
 * at MASTER_ADDR:MASTER_PORT (see {@link LaunchedRank}).
 */
public final class PretrainGpt {
    private PretrainGpt() {}

    /**
     * @param argv Megatron-LM-style flags; see {@link PretrainArgs}
     */
    public static void main(String[] argv) {
        PretrainArgs args;
        try {
            args = PretrainArgs.parse(argv);
        } catch (IllegalArgumentException e) {
            System.err.println("pretrain-gpt: " + e.getMessage());
            System.exit(2);
            return;
        }
        try {
            run(args, System.out);
        } catch (Exception e) {
            System.err.println("pretrain-gpt failed: " + e);
            e.printStackTrace();
            System.exit(1);
        }
    }

    /**
     * Runs the job and returns the training losses the logging rank saw.
     *
     * @param args parsed flags
     * @param out where progress goes
     * @return per-iteration losses
     * @throws Exception if any rank fails
     */
    public static List<Double> run(PretrainArgs args, PrintStream out) throws Exception {
        Mcore4j.ensureInitialized();
        Duration timeout = Duration.ofSeconds(args.timeoutSeconds());
        boolean launched = System.getenv("RANK") != null || System.getenv("SLURM_PROCID") != null
                || System.getenv("OMPI_COMM_WORLD_RANK") != null;
        int world = launched ? LaunchEnvironment.fromSystem().worldSize() : args.nproc();
        args.microBatchesPerStep(world); // fails early, naming the flags, if the batch does not divide
        try (GptSplits splits = datasets(args)) {
            SampleDataset train = splits.train().orElseThrow(() -> new IllegalArgumentException("the data has no training split"));
            SampleDataset valid = splits.valid().orElse(null);
            if (launched) {
                LaunchedRank rank = LaunchedRank.connect(timeout);
                try (Backend backend = rank.backend(); NDManager root = NDManager.newBaseManager(rank.device())) {
                    return new Trainer(args, backend, root, train, valid, out).run();
                }
            }
            List<List<Double>> perRank = InJvmWorld.run(world, timeout,
                    rank -> new Trainer(args, rank.backend(), rank.manager(), train, valid, out).run());
            return perRank.stream().filter(l -> !l.isEmpty()).findFirst().orElse(List.of());
        }
    }

    private static GptSplits datasets(PretrainArgs args) throws Exception {
        long trainSamples = (long) args.trainIters() * args.globalBatchSize();
        long validSamples = (long) Math.max(1, args.evalIters()) * args.globalBatchSize();
        GptDatasetBuilder builder = GptDatasetBuilder.create().sequenceLength(args.seqLength()).seed(args.seed())
                .split(args.split()).samples(Math.max(trainSamples, args.globalBatchSize()), validSamples, 0);
        if (args.mockData()) {
            builder.mock(args.vocabSize());
        } else if (args.corpus() != null) {
            Path prefix = Path.of("runs", "corpus", "sources_text_document");
            int documents = SourceCorpus.build(args.corpus(), prefix);
            System.out.println("corpus: " + documents + " documents from " + args.corpus().toAbsolutePath().normalize()
                    + " -> " + prefix + ".bin/.idx (byte-level tokens)");
            builder.dataPath(prefix.toString());
        } else {
            builder.dataPath(String.join(" ", args.dataPath()));
        }
        return builder.build();
    }
}
