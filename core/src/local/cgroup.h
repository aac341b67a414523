/*
 * The responder's own cgroup (cgroup v2): asp-agent's keeper moves the agent into a child
 * of the cgroup it started in, so every process a command starts is born there and cannot
 * leave by setsid, a double fork or a cleared environment; the keeper, which stays
 * outside, ends them all with cgroup.kill (Linux 5.14) once the agent is gone. Where
 * cgroup v2 is not mounted writable, every call fails silently and the markers do the
 * work alone.
 */
#ifndef ASP_LOCAL_CGROUP_H
#define ASP_LOCAL_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Longest cgroup path used. */
#define LOCAL_CGROUP_PATH_MAX 1024

/*
 * The path of the cgroup `asp-agent-<pid>` beside us: a child of our cgroup in the
 * cgroup2 mount (/proc/self/cgroup's `0::` line, /proc/self/mountinfo). The keeper asks
 * with the agent's pid: it stays in the cgroup the agent started in. False without a
 * writable cgroup2 mount.
 */
bool local_cgroup_path(pid_t pid, char *path, size_t cap);

/*
 * Creates the cgroup `path` and moves the whole process `pid` into it. False (nothing
 * left behind) where we may not create or write it, the kernel has no cgroup.kill, or the
 * move fails. A few system calls, but the move waits for an RCU grace period (about
 * 10 ms): the keeper does it, not the agent.
 */
bool local_cgroup_enter(const char *path, pid_t pid);

/*
 * Moves the children `pid` has now (but `self`) into `path` too: the commands an agent
 * started before it was moved. What they forked already stays where it is. Bounded.
 */
void local_cgroup_adopt_children(const char *path, pid_t pid, pid_t self);

/*
 * Removes the empty `asp-agent-<pid>` siblings of `path` whose pid is gone (left by a
 * keeper that was killed too), with the empty cgroups of nested agents below them; a
 * populated one fails rmdir and stays. Bounded.
 */
void local_cgroup_sweep_stale(const char *path);

/*
 * For the keeper, once the agent is gone: SIGKILLs every process in `path` and below
 * (cgroup.kill), waits up to `wait_ms` for it to empty (cgroup.events), then removes it
 * and the cgroups of nested agents below it.
 */
void local_cgroup_end(const char *path, int wait_ms);

#endif

/*
 * A cgroup per command, `job-<n>` below the agent's own (a leaf: the agent stays in its
 * cgroup, which enables no controller). A thread of its own makes them ahead of need and,
 * once a command is reaped and nothing is left in its cgroup, keeps it for a later
 * command (a few) or removes it: a spawn takes one ready, and never waits for a mkdir,
 * an rmdir or an RCU grace period (moving a process would wait for one).
 */

/* Whether the agent is in its own cgroup (`<dir>/asp-agent-<our pid>`): then starts the
 * thread that keeps a spare ready. Once. */
bool local_jobcg_init(void);

/* An empty job cgroup: *n its number, the O_PATH fd of its directory returned (ours,
 * valid until local_jobcg_release: the caller does not close it), or -1. */
int local_jobcg_take(unsigned *n);

/* SIGKILLs everything in job cgroup n (cgroup.kill), whatever it did to its group. */
void local_jobcg_kill(unsigned n);

/* Job cgroup n is done with (its command reaped, or never born in it): reused or
 * removed once empty; what a command left running there stays until then. */
void local_jobcg_release(unsigned n);
