/**
 * JSON for checkpoint metadata and safetensors headers, on Gson (the project's one JSON library) in
 * strict mode. Values map to {@code String}, {@code Long}, {@code Double}, {@code Boolean},
 * {@code List}, {@code Map<String, Object>} and {@code null}; output is deterministic (object keys
 * sorted), every parse error names its line and column, and duplicate keys are refused.
 */
package io.mcore4j.checkpoint.json;
