/**
 * Generation as a service: {@link io.mcore4j.inference.engine.GenerationEngine}, the contract between whatever
 * steps a model for many requests at once and whatever feeds it requests (the HTTP server, the command line).
 */
package io.mcore4j.inference.engine;
