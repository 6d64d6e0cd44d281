// Package queue owns the work queue: the message envelope, enqueueing, and
// the consumer pool that dequeues, runs handlers, retries with backoff and
// sets poison messages aside.
package queue
