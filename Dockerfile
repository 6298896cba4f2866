# berth's container image: one static binary on a distroless base, run as
# a non-root user. Build: docker build --build-arg BERTH_VERSION=v1.4.0 \
#   --build-arg BERTH_COMMIT=$(git rev-parse HEAD) -t berth:v1.4.0 .
# The build step is scripts/release-build.sh, the same file .ci/run runs.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first: a change to berth's code reuses the download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG BERTH_VERSION=dev
ARG BERTH_COMMIT=unknown
RUN BERTH_VERSION=${BERTH_VERSION} BERTH_COMMIT=${BERTH_COMMIT} ./scripts/release-build.sh /out/berth

# distroless/static: CA certificates, tzdata and /etc/passwd, no shell, no
# package manager; the :nonroot tag runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/berth /usr/local/bin/berth
USER 65532:65532
EXPOSE 8080
ENV BERTH_HTTP_ADDR=:8080
# No curl in the image: the binary probes itself.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/berth", "probe"]
ENTRYPOINT ["/usr/local/bin/berth"]
CMD ["serve"]
