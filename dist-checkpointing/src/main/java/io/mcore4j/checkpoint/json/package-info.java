/**
 * A small, strict JSON reader and writer for checkpoint metadata and safetensors headers, so the
 * checkpoint module needs no JSON dependency. Values map to {@code String}, {@code Long},
 * {@code Double}, {@code Boolean}, {@code List}, {@code Map<String, Object>} and {@code null};
 * output is deterministic (object keys sorted) and every parse error names its position.
 */
package io.mcore4j.checkpoint.json;
