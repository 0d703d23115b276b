/**
 * The multi-process backend: {@link io.mcore4j.parallel.tcp.TcpBackend} connects one process per
 * rank into a full TCP mesh through the rendezvous store of
 * {@link io.mcore4j.parallel.rendezvous}, every connection authenticated both ways by the
 * {@link io.mcore4j.parallel.rendezvous.JobToken}. Its communicators match the in-JVM backend's
 * results bit for bit and fail with a named rank, never hang, when a peer dies or stalls.
 */
package io.mcore4j.parallel.tcp;
