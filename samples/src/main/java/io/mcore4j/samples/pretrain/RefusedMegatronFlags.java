package io.mcore4j.samples.pretrain;

import picocli.CommandLine.Option;

import java.util.ArrayList;
import java.util.List;

/**
 * Megatron-LM training flags that its example scripts set and {@code pretrain-gpt} does not
 * implement: each is parsed (so a pasted script never stops at "Unknown option") and then refused by
 * {@link #check()} with one line naming the flag, its value and what mcore4j does instead. A picocli
 * mixin of {@link PretrainArgs}; the lines are listed in docs/megatron-flags.md.
 */
public final class RefusedMegatronFlags {
    // tokenizers (the others are TokenizerOptions')
    @Option(names = "--tiktoken-pattern", description = "Accepted without effect: it configures Megatron's TikTokenizer,"
            + " which is refused.")
    String tiktokenPattern;

    // model
    @Option(names = "--init-method-xavier-uniform", description = "Refused: weights are initialised from a normal"
            + " distribution (--init-method-std) only.")
    boolean initMethodXavierUniform;

    // checkpoints
    @Option(names = "--ckpt-format", description = "Refused: mcore4j writes its own sharded format, not Megatron's"
            + " torch, torch_dist, torch_dcp or fsdp_dtensor.")
    String ckptFormat;
    @Option(names = "--no-load-optim", description = "Refused: --load always restores the optimizer state.")
    boolean noLoadOptim;
    @Option(names = "--no-load-rng", description = "Refused: --load always restores the random state.")
    boolean noLoadRng;
    @Option(names = "--save-retain-interval", description = "Refused: mcore4j keeps the newest checkpoints (--save-retain).")
    String saveRetainInterval;

    // sample-based schedules, batch ramp-up, loss, exits
    @Option(names = "--train-samples", description = "Refused: training is counted in iterations (--train-iters).")
    String trainSamples;
    @Option(names = "--lr-decay-samples", description = "Refused: the schedule is counted in iterations (--lr-decay-iters).")
    String lrDecaySamples;
    @Option(names = "--lr-warmup-samples", description = "Refused: the schedule is counted in iterations (--lr-warmup-iters).")
    String lrWarmupSamples;
    @Option(names = "--step-batch-size-schedule", description = "Refused: the global batch size is constant.")
    String stepBatchSizeSchedule;
    @Option(names = "--decoupled-lr", description = "Refused: one learning rate for all parameters (--lr).")
    String decoupledLr;
    @Option(names = "--decoupled-min-lr", description = "Refused: one learning rate for all parameters (--min-lr).")
    String decoupledMinLr;
    @Option(names = "--calculate-per-token-loss", description = "Refused: the loss is averaged per micro-batch.")
    boolean calculatePerTokenLoss;
    @Option(names = "--exit-duration-in-mins", description = "Refused: runs end at --train-iters.")
    String exitDurationInMins;

    @Option(names = "--fp8-param-gather", description = "Refused: parameters stay in bf16 or fp16 under FP8; only the"
            + " GEMMs' operands are float8.")
    boolean fp8ParamGather;

    // profiling and loggers
    @Option(names = "--profile", description = "Refused: no profiler hooks.")
    boolean profile;
    @Option(names = "--profile-step-start", description = "Refused: no profiler hooks.")
    String profileStepStart;
    @Option(names = "--profile-step-end", description = "Refused: no profiler hooks.")
    String profileStepEnd;
    @Option(names = "--wandb-project", description = "Refused: no Weights & Biases logger (--tensorboard-dir, --metrics-dir).")
    String wandbProject;
    @Option(names = "--wandb-exp-name", description = "Refused: no Weights & Biases logger (--tensorboard-dir, --metrics-dir).")
    String wandbExpName;

    /**
     * Refuses the first of these flags that was given.
     *
     * @throws IllegalArgumentException one line: the flag, its value, what mcore4j does instead
     */
    void check() {
        List<String> refusals = new ArrayList<>();
        flag(refusals, initMethodXavierUniform, "--init-method-xavier-uniform: only normal initialisation is implemented;"
                + " use --init-method-std");
        if (ckptFormat != null) {
            refusals.add("--ckpt-format " + ckptFormat + ": mcore4j does not write Megatron's checkpoint formats; --save"
                    + " writes mcore4j's own sharded format (iter_NNNNNNN directories, resharded on --load); drop the flag,"
                    + " or use --save-hf for a Hugging Face copy");
        }
        flag(refusals, noLoadOptim, "--no-load-optim: --load always restores the optimizer state; drop the flag"
                + " (--load-hf starts from weights alone)");
        flag(refusals, noLoadRng, "--no-load-rng: --load always restores the random state; drop the flag");
        value(refusals, "--save-retain-interval", saveRetainInterval, "keeping every n-th checkpoint is not implemented;"
                + " --save-retain N keeps the N newest (0: all)");
        value(refusals, "--train-samples", trainSamples, "training is counted in iterations; use --train-iters"
                + " (--train-samples / --global-batch-size)");
        value(refusals, "--lr-decay-samples", lrDecaySamples, "the schedule is counted in iterations; use --lr-decay-iters"
                + " (--lr-decay-samples / --global-batch-size)");
        value(refusals, "--lr-warmup-samples", lrWarmupSamples, "the schedule is counted in iterations; use"
                + " --lr-warmup-iters (--lr-warmup-samples / --global-batch-size)");
        value(refusals, "--step-batch-size-schedule", stepBatchSizeSchedule, "batch-size ramp-up is not implemented;"
                + " the global batch is --global-batch-size from the first iteration");
        value(refusals, "--decoupled-lr", decoupledLr, "a separate learning rate for the embedding and output layer is"
                + " not implemented; every parameter uses --lr");
        value(refusals, "--decoupled-min-lr", decoupledMinLr, "a separate learning rate for the embedding and output"
                + " layer is not implemented; every parameter uses --min-lr");
        flag(refusals, calculatePerTokenLoss, "--calculate-per-token-loss: the loss is averaged over each micro-batch's"
                + " tokens and the micro-batches; drop the flag");
        value(refusals, "--exit-duration-in-mins", exitDurationInMins, "a time limit is not implemented; the run ends"
                + " at --train-iters (a later run resumes with --load)");
        flag(refusals, fp8ParamGather, "--fp8-param-gather: FP8 parameters are not implemented; under --fp8-format the"
                + " parameters and their all-gather stay in bf16 or fp16, only the GEMMs' operands are float8; drop the flag");
        flag(refusals, profile, "--profile: no profiler hooks; drop the flag and run under nsys or async-profiler");
        value(refusals, "--profile-step-start", profileStepStart, "no profiler hooks; drop the flag");
        value(refusals, "--profile-step-end", profileStepEnd, "no profiler hooks; drop the flag");
        value(refusals, "--wandb-project", wandbProject, "no Weights & Biases logger; metrics go to --metrics-dir"
                + " (metrics.jsonl) and --tensorboard-dir");
        value(refusals, "--wandb-exp-name", wandbExpName, "no Weights & Biases logger; metrics go to --metrics-dir"
                + " (metrics.jsonl) and --tensorboard-dir");
        if (!refusals.isEmpty()) {
            throw new IllegalArgumentException(refusals.get(0));
        }
    }

    private static void flag(List<String> refusals, boolean given, String line) {
        if (given) {
            refusals.add(line);
        }
    }

    private static void value(List<String> refusals, String flag, String value, String reason) {
        if (value != null) {
            refusals.add(flag + " " + value + ": " + reason);
        }
    }
}
