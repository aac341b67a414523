/*
 * What an exec of `true` costs here without ASP, measured beside it in the same run
 * (bench_stdio, bench_peer_http): the bare floor, and the start floor, which also pays
 * for what the exec op guarantees.
 */
#ifndef ASP_BENCH_SPAWN_FLOOR_H
#define ASP_BENCH_SPAWN_FLOOR_H

/* posix_spawnp of `true`, then waitpid. Exits the program if the spawn fails. */
void spawn_floor_true(void);

/*
 * The same with the exec op's guarantees and nothing of ASP: stdin, stdout and stderr
 * pipes, its own session, the exit waited for by pidfd while the output ends are held
 * (one wake-up, as the local backend does), then the output drained and the child
 * reaped. Exits the program if a pipe or the spawn fails.
 */
void spawn_start_floor_true(void);

#endif
