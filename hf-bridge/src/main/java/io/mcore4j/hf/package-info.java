/**
 * Hugging Face checkpoints in and out. {@link io.mcore4j.hf.HfCheckpoint} reads a {@code config.json}
 * and its safetensors files and fills a GPT built at any tensor/pipeline/virtual/expert-parallel
 * layout, each rank reading only the byte ranges of its own shards; {@link io.mcore4j.hf.HfExport}
 * writes any layout back as a directory that {@code transformers} loads with {@code from_pretrained}.
 * The tensor correspondence lives in {@link io.mcore4j.hf.HfWeightMap}; bfloat16 is converted in Java.
 */
package io.mcore4j.hf;
