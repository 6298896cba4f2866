// Package faults is berth's fault suite: it runs two real `berth serve`
// processes on a throw-away PostgreSQL and Redis, drives them with an
// open-loop client that records every request and answer, injects a fault
// (PostgreSQL stopped, a process killed, terminated or paused, Redis
// killed, PostgreSQL's connections taken, the gateway refusing, hanging or
// lagging behind a fault proxy), and then checks what the clients saw
// against the database: `berth audit` is clean, every 201 hold is a
// booking, every retried key got the first answer, the seat holds are
// linearizable (Porcupine), and the money berth recorded matches the
// gateway's own record.
//
// The suite is slow (minutes), so it only builds with the faults tag:
// `make faults` runs it, and CI calls that after `make test`.
package faults
