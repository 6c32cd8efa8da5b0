-- Media clients' API keys, made and turned off by admins on the console without restarting
-- the gateway (which reads this table every OMNIUM_GATEWAY_KEYS_RELOAD_SECONDS). Only the
-- sha256 of a key is kept: the key is shown once, when it is made. Keys in the
-- OMNIUM_GATEWAY_API_KEYS setting keep working beside these.
CREATE TABLE api_key (
  id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  name            text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9._-]{2,64}$'),
  key_hash        text NOT NULL UNIQUE,
  rate_per_second double precision CHECK (rate_per_second > 0),
  burst           integer CHECK (burst >= 1),
  disabled        boolean NOT NULL DEFAULT false,
  made_by         text NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  changed_at      timestamptz NOT NULL DEFAULT now()
);
