// Package shard keeps the shard map of a sharded schedule: which live
// instance moves each shard of the ScheduledItems table, under which epoch,
// and the balancing that keeps the shares even.
//
// The map is one table partition ("~shards") of the schedule table: a row
// "~map" holding the generation of the balancer that last wrote it, and a
// row per shard holding its owner, epoch and since-time. Only the traffic
// cop balances (Balancer), writing every change in a transaction that is
// conditional on the "~map" row, so a deposed balancer's write fails.
// Every instance reads the map once a cycle (one query, whatever the shard
// count) and moves the shards it owns (Owner). A shard's epoch only grows;
// its mover writes the epoch into the shard's fence row and every commit is
// conditional on that row, so a deposed owner's commit is refused by
// storage, never judged by a clock.
//
// Liveness is per instance (Roster): each instance holds a lease on its own
// member blob; an instance is live while the service reports that lease in
// force. An idle fleet's cost therefore grows with its instances, not with
// its shards.
package shard
