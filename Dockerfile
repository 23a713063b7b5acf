# The gateway service image. Build from the repository root:
#   docker build -t gateway .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
RUN useradd --system --uid 10001 gateway && mkdir -p /var/lib/gateway/audit && chown gateway /var/lib/gateway/audit
COPY --from=build /install /usr/local
COPY policies /etc/gateway/policies
COPY examples /etc/gateway/examples
USER gateway
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=2s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz').status == 200 else 1)"
ENTRYPOINT ["gateway"]
CMD ["serve", "--config", "/etc/gateway/gateway.toml", "--host", "0.0.0.0", "--port", "8080"]
