/* desired_whole.c: an agent's view of a heartbeat answer's desired entries and of which
 * answer is newer (desired.h); apart from desired.c so that yard-agent links it alone. */
#include "scheduler/desired.h"

#include <stdio.h>
#include <string.h>

json_t *desired_whole(const json_t *desired, const json_t *parts, char *why, size_t why_len)
{
	json_t *out = json_array();
	size_t i;
	const json_t *d;
	json_array_foreach(desired, i, d)
	{
		const char *job = json_string_value(json_object_get(d, "shared"));
		if (job == NULL) {
			json_array_append(out, (json_t *)d);
			continue;
		}
		const json_t *part = json_object_get(parts, job);
		const json_t *env = json_object_get(part, "env");
		const json_t *own = json_object_get(d, "env");
		if (!json_is_object(env) || json_object_get(part, "spec") == NULL ||
		    (own != NULL && !json_is_object(own))) {
			snprintf(
			    why, why_len,
			    "desired entry %zu names shared part '%s', which desired_shared does "
			    "not hold whole (an object with env and spec)",
			    i, job);
			json_decref(out);
			return NULL;
		}
		json_t *whole = json_copy((json_t *)d);
		json_t *merged = own != NULL ? json_copy((json_t *)own) : json_object();
		const char *key;
		json_t *value;
		json_object_foreach((json_t *)env, key, value)
		{
			if (json_object_get(merged, key) == NULL)
				json_object_set(merged, key, value);
		}
		json_object_del(whole, "shared");
		json_object_set_new(whole, "env", merged);
		json_object_set(whole, "spec", json_object_get(part, "spec"));
		json_array_append_new(out, whole);
	}
	return out;
}

int desired_stale(const char *kept_leader, int64_t kept_version, const char *leader,
                  int64_t version)
{
	return kept_leader != NULL && leader != NULL && kept_leader[0] != '\0' &&
	       kept_version >= 0 && version >= 0 && strcmp(kept_leader, leader) == 0 &&
	       version < kept_version;
}
