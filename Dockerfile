# syntax=docker/dockerfile:1
#
# tokenmeter: multi-stage build. The first stage compiles the dependencies
# alone (cached until Cargo.toml/Cargo.lock change), then the crate; the
# runtime image is distroless (no shell, no package manager), non-root.
#
#   docker build -t tokenmeter .
#   docker run --rm -p 8080:8080 -p 9464:9464 tokenmeter serve --upstream http://my-llm:8000
#   docker run --rm -p 8080:8080 -p 9464:9464 -v $PWD/config:/etc/tokenmeter:ro tokenmeter

FROM rust:1.95-bookworm AS build
WORKDIR /src
# Dependencies first, against a stub crate, so this layer is reused when
# only the sources change.
COPY Cargo.toml Cargo.lock ./
# jemalloc's built-in options (`[env]`), read when jemalloc is compiled.
COPY .cargo ./.cargo
# The manifest declares `benches/meter.rs` (criterion), so the stub has one
# too: cargo refuses a manifest whose declared targets are missing.
RUN mkdir -p src benches && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
 && echo 'fn main() {}' > benches/meter.rs \
 && cargo build --release --locked \
 && rm -rf src benches
COPY src ./src
COPY benches ./benches
# The demo embeds the SLO presets (include_str!).
COPY config ./config
# Make the real sources newer than the stub's build artefacts.
RUN touch src/main.rs src/lib.rs && cargo build --release --locked --bin tokenmeter

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/tokenmeter /usr/local/bin/tokenmeter
COPY config/ /etc/tokenmeter/
# Inside a container both listeners must be reachable from outside it.
# (DL3064 flags any ENV whose name contains "TOKEN"; these are addresses.)
# hadolint ignore=DL3064
ENV TOKENMETER_LISTEN=0.0.0.0:8080 \
    TOKENMETER_ADMIN_LISTEN=0.0.0.0:9464
EXPOSE 8080 9464
# distroless "nonroot" user, by number so any runtime can resolve it.
USER 65532:65532
# Probes: GET :9464/healthz (liveness) and GET :9464/readyz (readiness, 503
# while draining). Distroless has no shell or curl for a HEALTHCHECK command;
# use the orchestrator's HTTP probes (see README).
ENTRYPOINT ["/usr/local/bin/tokenmeter"]
CMD ["serve", "--config", "/etc/tokenmeter/tokenmeter.yaml"]
