/**
 * {@code pretrain-gpt}: a Megatron-LM-style command line that trains a GPT under any TP x PP x VP
 * x DP layout, with ranks as threads of one JVM or as processes launched by torchrun, srun or
 * mpirun; logging, evaluation, checkpoint save and resume, a JSONL metrics file and a PNG loss curve.
 */
package io.mcore4j.samples.pretrain;
