/**
 * The rendezvous store every multi-process backend (TCP, NCCL) uses to find its peers: a small
 * key-value server ({@link io.mcore4j.parallel.rendezvous.TcpStoreServer}) that rank 0 (or a
 * launcher) hosts, its client ({@link io.mcore4j.parallel.rendezvous.TcpStore}, torch's TCPStore
 * operations), the job's shared secret ({@link io.mcore4j.parallel.rendezvous.JobToken}) and the
 * mutual challenge-response {@link io.mcore4j.parallel.rendezvous.Handshake} that opens every store
 * and peer connection, whose listeners bound the connections still in it with
 * {@link io.mcore4j.parallel.rendezvous.HandshakeSlots} and whose dialing side ends it by its
 * deadline through a {@link io.mcore4j.parallel.rendezvous.DeadlineInputStream}.
 * {@link io.mcore4j.parallel.rendezvous.RendezvousStore} makes one rank's store connection from its
 * launch environment.
 */
package io.mcore4j.parallel.rendezvous;
