/* The transport registry, and the local backend registered as an internal transport. */
#include "asp/transport.h"

#include "builtin.h"
#include "local/local.h"
#include "proto_desc.h"

#include <pthread.h>

#define MAX_TRANSPORTS 16

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static const asp_transport *reg[MAX_TRANSPORTS];
static size_t reg_count;

/* Adds or replaces the entry for t->kind. false when the registry is full. */
static bool put(const asp_transport *t)
{
	bool ok = true;
	pthread_mutex_lock(&reg_mu);
	size_t i = 0;
	while (i < reg_count && reg[i]->kind != t->kind)
		i++;
	if (i < reg_count)
		reg[i] = t;
	else if (reg_count < MAX_TRANSPORTS)
		reg[reg_count++] = t;
	else
		ok = false;
	pthread_mutex_unlock(&reg_mu);
	return ok;
}

void asp_transport_add(const asp_transport *t)
{
	put(t);
}

asp_status asp_transport_register(const asp_transport *t, asp_error *err)
{
	if (!t || !t->open || !t->close || !t->name)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "asp_transport_register: name, open and close are mandatory");
	asp_transports_init(); /* built-ins first, so an application's own one wins */
	if (!put(t))
		return asp_error_set(err, ASP_E_TOO_LARGE, NULL,
		                     "asp_transport_register: more than %d transports",
		                     MAX_TRANSPORTS);
	return ASP_OK;
}

const asp_transport *asp_transport_find(asp_transport_kind kind)
{
	asp_transports_init();
	const asp_transport *t = NULL;
	pthread_mutex_lock(&reg_mu);
	for (size_t i = 0; i < reg_count && !t; i++)
		if (reg[i]->kind == kind)
			t = reg[i];
	pthread_mutex_unlock(&reg_mu);
	return t;
}

/* ---- the local backend as a transport --------------------------------------------- */

static asp_ops local_ops; /* asp_local_ops with the streaming slots answering unsupported */

static void local_ops_init(void)
{
	local_ops = asp_local_ops;
	asp_ops_complete(&local_ops);
}

static asp_status local_open(const asp_config_view *cfg, const asp_ops **ops, void **self,
                             asp_error *err)
{
	(void)cfg;
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, local_ops_init);
	asp_local *l = asp_local_new(0);
	if (!l)
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	*ops = &local_ops;
	*self = l;
	return ASP_OK;
}

static void local_close(void *self)
{
	asp_local_free(self);
}

static const asp_transport local_transport = {
	.kind = ASP_TRANSPORT_LOCAL,
	.name = "local",
	.open = local_open,
	.abort = NULL, /* an op running in this process cannot be cut short */
	.close = local_close,
	.alive = NULL,
};

static void register_all(void)
{
	put(&local_transport);
	asp_builtin_transports_register();
}

void asp_transports_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, register_all);
}
