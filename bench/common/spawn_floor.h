/*
 * What an exec of `true` costs here without ASP, measured beside it in the same run
 * (bench_stdio, bench_peer_http): the bare floor, and the start floor, which also pays
 * for what the exec op guarantees.
 */
#ifndef ASP_BENCH_SPAWN_FLOOR_H
#define ASP_BENCH_SPAWN_FLOOR_H

#include <sys/types.h>

/* posix_spawnp of `true`, then waitpid. Exits the program if the spawn fails. */
void spawn_floor_true(void);

/*
 * The same with the exec op's guarantees and nothing of ASP: stdin, stdout and stderr
 * pipes, its own session, the exit waited for by pidfd while the output ends are held
 * (one wake-up, as the local backend does), then the output drained and the child
 * reaped. Exits the program if a pipe or the spawn fails.
 */
void spawn_start_floor_true(void);

/*
 * The relay floor: the start floor run by another process on a request over a pipe, its
 * answer back over another, one byte each way. The least an exec over a stdio pipe can
 * cost here: the caller sleeps across the command's run and is woken by another process,
 * as a client of asp-agent is, with nothing of ASP (no frames, no decoding).
 */
typedef struct spawn_relay {
	pid_t pid;
	int to, from; /* the request and answer pipes' ends */
} spawn_relay;

/* Starts the relay process: before any thread starts. Exits the program on failure. */
void spawn_relay_start(spawn_relay *r);
/* One exec of `true` through the relay. Exits the program if the relay is gone. */
void spawn_relay_true(spawn_relay *r);
/* Ends the relay process and waits for it. */
void spawn_relay_stop(spawn_relay *r);

#endif
