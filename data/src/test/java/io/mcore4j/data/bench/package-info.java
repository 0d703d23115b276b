/**
 * Throughput benchmarks (programs with a {@code main}, not tests): preprocessing megabytes per second per
 * worker on a generated JSON Lines corpus, and GPT sample loading in samples per second.
 */
package io.mcore4j.data.bench;
