vcl 4.1;

# Varnish in front of the public API gateway (tests/integration/test_gateway_shared_cache.py
# runs this file). It keeps a read as long as the gateway's Cache-Control says (s-maxage), one
# copy per content coding the gateway serves (Vary: Accept-Encoding), and drops every copy of a
# group at once when the gateway's outbox relay sends `PURGE` with `xkey-purge: <groups>`
# (OMNIUM_GATEWAY_PURGE_URLS=http://<this varnish>/). The groups come from the gateway's xkey
# response header (the same names as its Surrogate-Key).
#
# Needs the Debian packages varnish and varnish-modules (xkey). Point the backend at the
# gateway; put every gateway copy's relay host in `purgers`.
#
# The client's address: varnishd itself appends client.ip to X-Forwarded-For before vcl_recv,
# and the header goes on to the gateway with every pass and miss; nothing here may unset it.
# The gateway believes it only from the addresses in its OMNIUM_TRUSTED_PROXIES: list this
# Varnish there (and the balancer in front of it, which must add the header too), or every fan
# behind it shares one rate-limit bucket.

import xkey;

backend gateway {
    .host = "127.0.0.1";
    .port = "8080";
    .connect_timeout = 1s;
    .first_byte_timeout = 10s;
}

acl purgers {
    "127.0.0.1";
    "::1";
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (client.ip !~ purgers) {
            return (synth(403, "This address may not purge."));
        }
        if (req.http.xkey-purge) {
            set req.http.n-gone = xkey.purge(req.http.xkey-purge);
        } elsif (req.http.xkey) {
            set req.http.n-gone = xkey.purge(req.http.xkey);
        } else {
            return (synth(400, "Name the groups to drop in an xkey-purge header."));
        }
        return (synth(200, "Dropped " + req.http.n-gone + " copies."));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    # The public reads only: live streams (SSE), the scorer console and the probes go through.
    if (req.url !~ "^/v1/events(/|\?|$)" || req.url ~ "/live(\?|$)") {
        return (pass);
    }
    # One copy per coding the gateway serves, not one per browser's way of writing the header.
    # A coding counts when it is named with no q or a q above 0; Brotli first, as the gateway.
    if (req.http.Accept-Encoding ~ "(?i)(^|,)\s*br\s*(;\s*q\s*=\s*(1(\.0*)?|0?\.[0-9]*[1-9][0-9]*)\s*)?(,|$)") {
        set req.http.Accept-Encoding = "br";
    } elsif (req.http.Accept-Encoding ~ "(?i)(^|,)\s*(x-)?gzip\s*(;\s*q\s*=\s*(1(\.0*)?|0?\.[0-9]*[1-9][0-9]*)\s*)?(,|$)") {
        set req.http.Accept-Encoding = "gzip";
    } else {
        unset req.http.Accept-Encoding;
    }
    # Kept for the fetch: with http_gzip_support on, Varnish asks every backend for gzip.
    set req.http.X-Omnium-Encoding = req.http.Accept-Encoding;
    # The same copy for every client, with an API key or not: the gateway marks reads that need
    # a key `private`, and Varnish does not keep those.
    return (hash);
}

sub vcl_hash {
    # One object per coding. Varnish's own gzip handling (http_gzip_support, on by default)
    # rewrites Accept-Encoding to "gzip" or nothing after vcl_recv, so Vary alone would put the
    # Brotli copy under the plain one. Then the built-in rules hash the URL and host.
    hash_data(req.http.X-Omnium-Encoding);
}

sub vcl_backend_fetch {
    if (bereq.http.X-Omnium-Encoding) {
        set bereq.http.Accept-Encoding = bereq.http.X-Omnium-Encoding;
    } elsif (bereq.method != "PURGE") {
        unset bereq.http.Accept-Encoding;
    }
    unset bereq.http.X-Omnium-Encoding;
}

sub vcl_backend_response {
    # The TTL is the gateway's s-maxage and the grace its stale-while-revalidate (the built-in
    # rules read both); keep a copy a while longer to revalidate it with If-None-Match.
    set beresp.keep = 60s;
    # A refresh in the background that the gateway answers with an error (it is saturated, or
    # PostgreSQL is away): keep serving the copy in grace, not the error. (One it does not
    # answer at all Varnish drops by itself.)
    if (beresp.status >= 500 && bereq.is_bgfetch) {
        return (abandon);
    }
    # The gateway says s-maxage=0 when it serves its own copy stale, and when the last second
    # of a copy's life runs out (a live unit's 3 s). The built-in rules would make such a key
    # hit-for-miss for 120 s: every request for it straight to the gateway, none coalesced,
    # exactly the keys that change most and at the worst time. Keep it for its grace instead
    # (stale-while-revalidate): the next request gets it while one fetch in the background
    # refreshes it. A lookup never takes an object whose TTL is 0 (grace or not), so 1 ms.
    if (beresp.ttl <= 0s && beresp.grace > 0s && (beresp.status == 200 || beresp.status == 404)
        && beresp.http.Cache-Control ~ "(?i)(^|,)\s*public\s*(,|$)" && !beresp.http.Set-Cookie) {
        set beresp.ttl = 1ms;
        return (deliver);
    }
}

sub vcl_deliver {
    # What this cache did; the gateway's own answer (HIT in its memory, MISS...) stays beside.
    if (resp.http.X-Cache) {
        set resp.http.X-Gateway-Cache = resp.http.X-Cache;
    }
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
        # A copy served from here was counted against no one's quota; its RateLimit fields are
        # those of the client whose request fetched it, not this one's.
        unset resp.http.RateLimit;
        unset resp.http.RateLimit-Policy;
    } else {
        set resp.http.X-Cache = "MISS";
    }
    # The groups are for caches, not for the fans' browsers.
    unset resp.http.xkey;
    unset resp.http.Surrogate-Key;
    unset resp.http.X-Omnium-Encoding;
}
