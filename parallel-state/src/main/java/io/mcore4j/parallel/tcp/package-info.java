/**
 * The multi-process backend: {@link io.mcore4j.parallel.tcp.TcpBackend} connects one process per
 * rank into a full TCP mesh through a rendezvous store ({@link io.mcore4j.parallel.tcp.TcpStoreServer},
 * {@link io.mcore4j.parallel.tcp.TcpStore}) that rank 0 hosts, every connection authenticated by a
 * {@link io.mcore4j.parallel.tcp.JobToken}; {@link io.mcore4j.parallel.tcp.RendezvousStore} makes
 * that store connection for every multi-process backend (NCCL too). Its communicators match the in-JVM backend's results
 * bit for bit and fail with a named rank, never hang, when a peer dies or stalls.
 */
package io.mcore4j.parallel.tcp;
