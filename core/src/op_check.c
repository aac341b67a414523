/* Transport-independent checks of op params (see op_check.h). */
#include "op_check.h"

asp_status asp_check_write_params(const asp_write_params *p, asp_error *err)
{
	if (p->has_offset && (p->append || p->atomic))
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, p->path,
		                     "write %s: 'offset' cannot be combined with '%s'", p->path,
		                     p->append ? "append" : "atomic");
	if (p->mode > 07777)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, p->path,
		                     "write %s: mode %#llo has bits beyond 07777", p->path,
		                     (unsigned long long)p->mode);
	if (p->has_offset && p->offset > (uint64_t)INT64_MAX - p->data.len)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, p->path,
		                     "write %s: offset %llu is out of range", p->path,
		                     (unsigned long long)p->offset);
	return ASP_OK;
}

asp_status asp_check_tty_size(const char *what, uint64_t rows, uint64_t cols, asp_error *err)
{
	if (rows < 1 || rows > ASP_TTY_MAX || cols < 1 || cols > ASP_TTY_MAX)
		return asp_error_set(
		    err, ASP_E_INVALID_ARGUMENT, NULL,
		    "%s: a terminal of %llu rows and %llu cols: each must be 1 to %d", what,
		    (unsigned long long)rows, (unsigned long long)cols, ASP_TTY_MAX);
	return ASP_OK;
}

asp_status asp_check_required(const char *op, const char *field, const char *value, asp_error *err)
{
	if (value)
		return ASP_OK;
	return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL, "%s: field '%s' is required", op,
	                     field);
}

asp_status asp_check_path(const char *op, const char *path, asp_error *err)
{
	if (path && path[0])
		return ASP_OK;
	if (!path)
		return asp_check_required(op, "path", path, err);
	return asp_error_set(
	    err, ASP_E_NOT_FOUND, NULL,
	    "%s: 'path' is empty, which names nothing; '.' is the working directory", op);
}
