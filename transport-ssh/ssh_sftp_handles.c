/*
 * Which handle sftp-server's next OPEN answers, so that the requests on the file (READ,
 * WRITE, CLOSE) go out with the OPEN instead of a round trip after it.
 *
 * OpenSSH's sftp-server (the one Debian's sshd and Dropbear run) names a handle by its
 * slot in a table, 4 bytes big-endian; an OPEN or OPENDIR takes the slot freed last (a
 * LIFO list: a CLOSE of a valid handle frees its slot), or else a new one at the end.
 * It answers in order, so the table is known here: the answers of every OPEN sent and the
 * CLOSEs sent after the oldest unanswered one are replayed in the order the server saw
 * them. An OPEN whose CLOSE goes out in its own batch (a tree's file: OPEN, WRITEs,
 * FSETSTAT, CLOSE) leaves the table as it found it whether it succeeds or not (it takes
 * the slot on top and gives it back), so a guess is made while only such OPENs are
 * unanswered, the events after the last answer replayed on a copy; any other OPEN
 * unanswered stops guessing until it is answered. A guess never names a handle of ours
 * that is open, and is checked against the OPEN's answer; the first answer that
 * disagrees (another server, another scheme) turns guessing off for the channel. A wrong guess is
 * harmless: the server has no such handle (only ours exist on the channel, and every one of ours is
 * known), so the requests on it fail and are sent again on the real handle.
 */
#include "ssh_sftp.h"

#include <stdlib.h>
#include <string.h>

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static bool grow(void **p, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return true;
	size_t ncap = *cap ? *cap * 2 : 8;
	void *np = realloc(*p, ncap * size);
	if (!np)
		return false;
	*p = np;
	*cap = ncap;
	return true;
}

void sftp_handles_reset(sftpc *f)
{
	sftp_handles *h = &f->handles;
	free(h->free);
	free(h->open);
	free(h->q);
	memset(h, 0, sizeof *h);
}

static void off(sftp_handles *h)
{
	h->off = true;
}

static void freed(sftp_handles *h, uint32_t v)
{
	if (!grow((void **)&h->free, &h->cap_free, h->n_free, sizeof *h->free))
		return off(h);
	h->free[h->n_free++] = v;
}

/*
 * A CLOSE of v, where the server has seen it: the slot is freed when v is one of ours
 * open (sftp-server frees a valid handle's slot even when close(2) fails; an unknown one,
 * such as a guess that missed, frees nothing).
 */
static void closed(sftp_handles *h, uint32_t v)
{
	for (size_t i = 0; i < h->n_open; i++)
		if (h->open[i] == v) {
			h->open[i] = h->open[--h->n_open];
			freed(h, v);
			return;
		}
}

void sftp_handles_sent(sftpc *f, uint8_t type, uint32_t id, const uint8_t *body, size_t len)
{
	sftp_handles *h = &f->handles;
	if (h->off)
		return;
	if (type == FXP_OPEN || type == FXP_OPENDIR) {
		bool self = h->next_self;
		h->next_self = false;
		if (!grow((void **)&h->q, &h->cap_q, h->n_q, sizeof *h->q))
			return off(h);
		h->q[h->n_q++] =
		    (sftp_hevent){.open = true, .self = self, .id = id, .v = h->next_v};
		h->pending++;
		h->others += !self;
		return;
	}
	if (type != FXP_CLOSE)
		return;
	/* the body: string handle */
	if (len < 8 || get32(body) != 4)
		return off(h);
	uint32_t v = get32(body + 4);
	if (h->pending == 0)
		return closed(h, v);
	if (!grow((void **)&h->q, &h->cap_q, h->n_q, sizeof *h->q))
		return off(h);
	h->q[h->n_q++] = (sftp_hevent){.open = false, .v = v};
}

void sftp_handles_reply(sftpc *f, uint32_t id, uint8_t type, const uint8_t *body, size_t len)
{
	sftp_handles *h = &f->handles;
	if (h->off || h->n_q == 0 || !h->q[0].open || h->q[0].id != id) {
		for (size_t i = 1; !h->off && i < h->n_q; i++)
			if (h->q[i].open && h->q[i].id == id)
				off(h); /* answered out of order: not the server described above */
		return;
	}
	bool self = h->q[0].self;
	if (type == FXP_HANDLE) {
		uint32_t want = h->n_free ? h->free[h->n_free - 1] : h->slots;
		if (len != 8 || get32(body) != 4 || get32(body + 4) != want ||
		    (self && want != h->q[0].v))
			return off(h);
		if (h->n_free)
			h->n_free--;
		else
			h->slots++;
		if (!grow((void **)&h->open, &h->cap_open, h->n_open, sizeof *h->open))
			return off(h);
		h->open[h->n_open++] = want;
	}
	/* the OPEN is settled; the CLOSEs sent after it until the next OPEN free their slots */
	size_t k = 1;
	while (k < h->n_q && !h->q[k].open)
		closed(h, h->q[k++].v);
	memmove(h->q, h->q + k, (h->n_q - k) * sizeof *h->q);
	h->n_q -= k;
	h->pending--;
	h->others -= !self;
}

/* The slot the next OPEN takes, the unanswered events replayed on a copy of the table;
 * false when one of ours would be named or an OPEN's guess does not follow. */
static bool replay(const sftp_handles *h, uint32_t *out)
{
	uint32_t *fr = malloc((h->n_free + h->n_q + 1) * sizeof *fr);
	uint32_t *op = malloc((h->n_open + h->n_q + 1) * sizeof *op);
	if (!fr || !op) {
		free(fr);
		free(op);
		return false; /* no guess: the requests follow the answer */
	}
	size_t nf = h->n_free, no = h->n_open;
	uint32_t slots = h->slots;
	if (nf)
		memcpy(fr, h->free, nf * sizeof *fr);
	if (no)
		memcpy(op, h->open, no * sizeof *op);
	bool ok = true;
	for (size_t i = 0; ok && i < h->n_q; i++) {
		const sftp_hevent *e = &h->q[i];
		if (e->open) {
			uint32_t t = nf ? fr[--nf] : slots++;
			ok = t == e->v;
			op[no++] = t;
			continue;
		}
		for (size_t k = 0; k < no; k++)
			if (op[k] == e->v) {
				op[k] = op[--no];
				fr[nf++] = e->v;
				break;
			}
	}
	uint32_t v = nf ? fr[nf - 1] : slots;
	for (size_t i = 0; ok && i < no; i++)
		ok = op[i] != v;
	free(fr);
	free(op);
	*out = v;
	return ok;
}

bool sftp_handles_guess(sftpc *f, uint8_t out[4])
{
	sftp_handles *h = &f->handles;
	uint32_t v;
	if (h->off || h->others || !replay(h, &v))
		return false;
	out[0] = (uint8_t)(v >> 24);
	out[1] = (uint8_t)(v >> 16);
	out[2] = (uint8_t)(v >> 8);
	out[3] = (uint8_t)v;
	return true;
}

void sftp_handles_closed_in_batch(sftpc *f, const uint8_t g[4])
{
	f->handles.next_self = true;
	f->handles.next_v = get32(g);
}
